"""The continuous-batching engine on the real model: batched generate in order, concurrent
streams, abort, bad requests, and a leak test under preemption with random aborts."""
from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from conftest import greedy_rows, model_file
from localllm import LLM, _core
from localllm.engine import Engine
from localllm.gguf import GGUFFile
from localllm.sampling import SamplingParams
from localllm.text.tokenizer import Tokenizer

KEY = "smollm2-135m-q4_1"


@pytest.fixture(scope="module")
def llm():
    return LLM(str(model_file(KEY)), n_threads=2, n_ctx=2048, seed=0, max_running=8)


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_gguf_metadata(GGUFFile(str(model_file(KEY))).metadata)


def small_engine(tokenizer, kv_blocks: int, cache: tuple[str, str] = ("f16", "f16"), **kw) -> Engine:
    model = _core.Model(str(model_file(KEY)), 2, kv_blocks, 16, cache_type_k=cache[0], cache_type_v=cache[1])
    return Engine(model, tokenizer, n_ctx=2048, **kw)


def test_generate_list_runs_concurrently_in_order(llm):
    rows = greedy_rows(KEY)
    prompts = [r["prompt_ids"] for r in rows]
    steps0 = llm.engine.stats.steps
    batched = llm.generate(prompts, max_tokens=10, temperature=0)
    batched_steps = llm.engine.stats.steps - steps0
    assert [r.prompt_token_ids for r in batched] == prompts
    singles = [llm.generate(p, max_tokens=10, temperature=0) for p in prompts]
    for b, s, row in zip(batched, singles, rows):
        assert b.token_ids == s.token_ids and b.text == s.text and b.finish_reason == s.finish_reason
        assert b.token_ids[:3] == row["greedy_ids"][:3]          # llama.cpp's greedy start
    # Concurrent: far fewer steps than running the prompts one after the other.
    assert batched_steps <= 12
    # Sampled (not greedy) with a seed: same result batched or alone.
    texts = ["Once upon a time", "The capital of France is", "def fibonacci(n):"]
    sampled = llm.generate(texts, max_tokens=12, temperature=0.9, seed=7)
    assert [r.text for r in sampled] == [llm.generate(t, max_tokens=12, temperature=0.9, seed=7).text for t in texts]
    with pytest.raises(ValueError, match="empty"):
        llm.generate([], max_tokens=4)


def test_concurrent_streams_both_progress(llm):
    a = llm.stream("Once upon a time", max_tokens=16, temperature=0)
    b = llm.stream("The quick brown fox", max_tokens=16, temperature=0)
    steps0 = llm.engine.stats.steps
    pieces_a, pieces_b = [], []
    for _ in range(5):                                   # alternate: both advance
        pieces_a.append(next(a))
        pieces_b.append(next(b))
    assert llm.engine.stats.steps - steps0 <= 7          # each step fed both streams
    pieces_a += list(a)
    pieces_b += list(b)
    assert "".join(pieces_a) == llm.generate("Once upon a time", max_tokens=16, temperature=0).text
    assert "".join(pieces_b) == llm.generate("The quick brown fox", max_tokens=16, temperature=0).text
    assert a.finish_reason == b.finish_reason == "length" and len(a.token_ids) == 16


def test_streams_consumed_from_threads(llm):
    prompts = ["One, two, three,", "Water boils at", "import numpy as np\n", "Dear Sir,"]
    want = [llm.generate(p, max_tokens=12, temperature=0).text for p in prompts]
    got = [None] * len(prompts)
    streams = [llm.stream(p, max_tokens=12, temperature=0) for p in prompts]

    def consume(i):
        got[i] = "".join(streams[i])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == want


def test_abort_frees_blocks_at_once(tokenizer):
    eng = small_engine(tokenizer, kv_blocks=64, max_batch_tokens=64, max_running=4)
    params = SamplingParams(max_tokens=200, temperature=0.0, seed=0)
    keep = eng.submit(list(range(100, 120)), params)
    victim = eng.submit(list(range(300, 350)), params)
    for _ in range(3):
        eng.next_output(keep)
    held = len(eng.sequence(victim).table.blocks)
    assert held == 4 and eng.pool.num_used == held + 2
    used = eng.pool.num_used
    assert eng.abort(victim)
    assert eng.pool.num_used == used - held                # released now, not at the next step
    assert eng.next_output(victim) is None and not eng.abort(victim)
    assert eng.sequence(victim) is None
    assert eng.next_output(keep).token_ids                # the other one goes on
    eng.abort(keep)
    assert eng.pool.num_used == 0 and not eng.has_unfinished()
    with pytest.raises(ValueError, match="unknown request"):
        eng.next_output(12345)


def test_requests_that_can_never_fit(tokenizer, llm):
    eng = small_engine(tokenizer, kv_blocks=3, max_batch_tokens=64, max_running=4)   # 32 slots
    ok = SamplingParams(max_tokens=10, temperature=0.0, seed=0)
    with pytest.raises(ValueError, match="KV blocks"):
        eng.submit([1] * 24, ok)                          # 33 positions
    with pytest.raises(ValueError, match="n_ctx"):
        eng.submit([1] * 2040, ok)
    with pytest.raises(ValueError, match="empty"):
        eng.submit([], ok)
    with pytest.raises(ValueError, match="out of range"):
        eng.submit([10 ** 7], ok)
    assert not eng.has_unfinished() and eng.pool.num_used == 0
    rid = eng.submit([1] * 23, ok)                        # 23 + 10 - 1 = 32 positions fit
    assert sum(len(o.token_ids) for o in eng.outputs(rid)) >= 1
    assert eng.pool.peak_used <= 2
    with pytest.raises(ValueError):
        llm.generate(["fine", [10 ** 7]], max_tokens=2)
    assert llm.engine.pool.num_used == 0 and not llm.engine.has_unfinished()


@pytest.mark.parametrize("cache", [("f16", "f16"), ("q8_0", "q4_0")])   # f16, and a quantized KV cache
def test_leak_300_random_requests_with_preemption_and_aborts(tokenizer, cache):
    rng = random.Random(0)
    eng = small_engine(tokenizer, kv_blocks=16, cache=cache, max_batch_tokens=128, max_running=8)   # 240 slots
    n_vocab = eng.n_vocab
    shared = [rng.randrange(n_vocab) for _ in range(48)]
    live: dict[int, int] = {}                            # request id -> outputs seen
    finished, aborted, submitted = 0, 0, 0
    results: dict[int, list[int]] = {}
    prompts: dict[int, tuple[list[int], SamplingParams]] = {}
    while submitted < 300 or live:
        while submitted < 300 and len(live) < 24:
            n = rng.randrange(1, 60)
            prompt = (shared[:rng.randrange(16, 49)] if rng.random() < 0.5 else []) + \
                [rng.randrange(n_vocab) for _ in range(n)]
            params = SamplingParams(max_tokens=rng.randrange(1, 9), temperature=0.8, seed=submitted)
            rid = eng.submit(prompt, params)
            prompts[rid] = (prompt, params)
            live[rid] = 0
            results[rid] = []
            submitted += 1
        rid = rng.choice(list(live))
        if rng.random() < 0.08:
            eng.abort(rid)
            del live[rid], results[rid]
            aborted += 1
            continue
        out = eng.next_output(rid)
        results[rid] += out.token_ids
        if out.finished:
            del live[rid]
            finished += 1
    assert finished + aborted == 300 and aborted > 10
    assert eng.stats.preemptions > 0 and eng.pool.stats.hit_blocks > 0
    # Every block is free or cached; nothing is referenced.
    assert eng.pool.num_used == 0 and eng.pool.num_free == eng.pool.capacity
    assert all(eng.pool.ref_counts[b] == 0 for b in range(1, eng.pool.n_blocks))
    assert not eng.has_unfinished()
    # Preempted, batched, cached or not: the same tokens as each request run alone.
    alone = small_engine(tokenizer, kv_blocks=64, cache=cache, max_batch_tokens=256, max_running=1)
    for rid in rng.sample(sorted(results), 6):
        prompt, params = prompts[rid]
        solo = alone.submit(prompt, params)
        assert [t for o in alone.outputs(solo) for t in o.token_ids] == results[rid]


def test_cli_runs_several_prompts_as_one_batch(llm, tmp_path):
    import subprocess
    import sys
    prompts = ["The capital of France is", "def add(a, b):"]
    f = tmp_path / "prompts.txt"
    f.write_text(prompts[0] + "\n\n" + prompts[1] + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "localllm_cli", "run", "-m", str(model_file(KEY)), "-n", "6", "--temp", "0",
           "-t", "2", "--parallel", "2", "--kv-memory", "8"]
    for args in (["-p", prompts[0], "-p", prompts[1]], ["-f", str(f), "--lines"]):
        proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        want = "".join(f"--- [{i + 1}/2] (length) ---\n{llm.generate(p, max_tokens=6, temperature=0).text}\n"
                       for i, p in enumerate(prompts))
        assert proc.stdout == want
        assert "batch of 2" in proc.stderr and "peak KV" in proc.stderr
    bad = subprocess.run(cmd + ["-p", "x", "--lines"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "--lines needs -f" in bad.stderr


def test_dropped_or_closed_streams_free_their_blocks(llm):
    import gc
    eng = llm.engine
    started = llm.stream("A long story about a cat:", max_tokens=64, temperature=0)
    next(started)
    assert eng.has_unfinished() and eng.pool.num_used > 0
    del started
    gc.collect()
    assert not eng.has_unfinished() and eng.pool.num_used == 0
    unstarted = llm.stream("Never read", max_tokens=64, temperature=0)
    assert eng.has_unfinished()
    unstarted.close()
    assert not eng.has_unfinished() and eng.pool.num_used == 0
    dropped = llm.stream("Never read either", max_tokens=64, temperature=0)
    del dropped
    gc.collect()
    assert not eng.has_unfinished()


def test_a_failing_request_does_not_stop_the_others(tokenizer):
    eng = small_engine(tokenizer, kv_blocks=32, max_batch_tokens=64, max_running=4)
    good = eng.submit([1, 2, 3, 4, 5], SamplingParams(max_tokens=6, temperature=0.0, seed=0))
    # Every token banned: the sampler raises when this sequence's turn comes.
    banned = {t: float("-inf") for t in range(eng.n_vocab)}
    bad = eng.submit([6, 7, 8], SamplingParams(max_tokens=6, temperature=0.0, seed=0, logit_bias=banned))
    with pytest.raises(RuntimeError, match=f"request {bad} failed"):
        eng.next_output(bad)
    assert eng.next_output(bad) is None
    assert sum(len(o.token_ids) for o in eng.outputs(good)) == 6
    assert eng.pool.num_used == 0 and eng.stats.finished == 2


def test_sample_rows_draws_what_each_sampler_draws_alone(tokenizer):
    """Model.sample_rows (the engine's one call per step) against each sampler run alone on its
    row: same tokens, same penalty history; a failing row gets its error and leaves the others'
    draws as they would be without it; misuse raises instead of racing."""
    model = _core.Model(str(model_file(KEY)), 2, 8, 16)
    n_vocab = model.hparams["n_vocab"]
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((6, n_vocab)) * 4).astype(np.float32)
    logits[4, 0] = np.nan                                     # row 4 fails
    settings = [dict(temperature=0.0), dict(temperature=0.8), dict(temperature=1.0, top_k=0, top_p=0.9),
                dict(temperature=0.7, min_p=0.1, repeat_penalty=1.3), dict(temperature=0.8),
                dict(temperature=0.9, logit_bias={5: 10.0})]
    make = lambda: [_core.Sampler(n_vocab=n_vocab, seed=100 + i, n_logprobs=-1, **kw) for i, kw in enumerate(settings)]
    batched, alone = make(), make()
    rows = [5, 1, 2, 3, 4, 0]                                 # sampler i reads logits[rows[i]]
    for step in range(4):
        tokens, errors = model.sample_rows(batched, logits, rows)
        for i, s in enumerate(alone):
            if rows[i] == 4:
                assert tokens[i] == -1 and "NaN" in errors[i]
                continue
            expected = s.sample(logits[rows[i]])
            s.accept(expected)
            assert (tokens[i], errors[i]) == (expected, None), (step, i)
        logits = np.roll(logits, 17, axis=1)
        logits[4, :] = np.nan
    with pytest.raises(ValueError, match="twice"):
        model.sample_rows([batched[0], batched[0]], logits, [0, 1])
    with pytest.raises(ValueError, match="out of range"):
        model.sample_rows(batched[:1], logits, [6])
    with pytest.raises(ValueError, match="n_vocab"):
        model.sample_rows([_core.Sampler(n_vocab=10)], logits, [0])
