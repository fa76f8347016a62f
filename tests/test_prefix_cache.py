"""Automatic prefix caching with the real model: a request sharing a 1,000-token prefix with a
finished one computes only its new tokens, gives the same output (and logits, bit for bit) as
without the cache, and gets its first token at least 5x sooner."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import CORPUS, model_file
from localllm import _core
from localllm.engine import Engine
from localllm.gguf import GGUFFile
from localllm.sampling import SamplingParams
from localllm.text.tokenizer import Tokenizer

KEY = "smollm2-135m-q4_1"
PREFIX = 1000
BS = 16


@pytest.fixture(scope="module")
def parts():
    path = str(model_file(KEY))
    tok = Tokenizer.from_gguf_metadata(GGUFFile(path).metadata)
    text = CORPUS.read_text(encoding="utf-8")
    ids = tok.encode(text, add_special=True)
    assert len(ids) > PREFIX + 100
    prefix = ids[:PREFIX]
    first = prefix + tok.encode(" Question: what is this text about? Answer:", add_special=False)
    second = prefix + tok.encode(" In one sentence, this license", add_special=False)
    assert first[PREFIX] != second[PREFIX]
    return path, tok, first, second


def engine(path, tok, kv_blocks=256) -> Engine:
    return Engine(_core.Model(path, 2, kv_blocks, BS), tok, n_ctx=2048, max_batch_tokens=512, max_running=4)


def run(eng: Engine, prompt: list[int], n: int = 8):
    """Greedy n tokens; returns (tokens, logits [steps, n_vocab], ttft seconds, tokens computed)."""
    computed0 = eng.stats.tokens_computed
    rid = eng.submit(prompt, SamplingParams(max_tokens=n, temperature=0.0, seed=0), keep_logits=True)
    first = eng.next_output(rid)
    ttft = first.times.ttft
    outs = [first] + list(eng.outputs(rid))
    toks = [t for o in outs for t in o.token_ids]
    return toks, np.stack([o.logits for o in outs]), ttft, eng.stats.tokens_computed - computed0


def test_shared_prefix_is_not_recomputed(parts):
    path, tok, first, second = parts
    eng = engine(path, tok)
    run(eng, first)
    assert eng.pool.num_used == 0 and eng.pool.num_cached >= PREFIX // BS
    hits0 = eng.pool.stats.hit_tokens
    toks, logits, ttft_cached, computed = run(eng, second)
    cached = (PREFIX // BS) * BS                           # full blocks of the shared prefix
    assert eng.pool.stats.hit_tokens - hits0 == cached
    seq_fed = len(second) - cached + (len(toks) - 1)       # new prompt tokens + fed-back outputs
    assert computed == seq_fed

    fresh = engine(path, tok)
    ref_toks, ref_logits, ttft_fresh, ref_computed = run(fresh, second)
    assert fresh.pool.stats.hit_tokens == 0 and ref_computed == len(second) + len(toks) - 1
    assert toks == ref_toks
    assert np.array_equal(logits, ref_logits)
    assert ttft_cached * 5 <= ttft_fresh, (ttft_cached, ttft_fresh)


def test_counters_after_repeat_and_eviction(parts):
    path, tok, first, _ = parts
    # Room for one 1,000-token sequence and a little more: other traffic evicts the prefix.
    eng = engine(path, tok, kv_blocks=(len(first) + 8) // BS + 8)
    ref = run(eng, first)[0]
    s0 = eng.pool.stats
    q0, h0 = s0.query_blocks, s0.hit_blocks
    again = run(eng, first)
    eligible = (len(first) - 1) // BS
    assert (eng.pool.stats.query_blocks - q0, eng.pool.stats.hit_blocks - h0) == (eligible, eligible)
    assert again[0] == ref
    assert again[3] == len(first) - eligible * BS + len(ref) - 1
    # Unrelated requests take the pool; the least recently used cached blocks go first.
    ev0 = eng.pool.stats.evictions
    other = list(reversed(first))
    run(eng, other[:200], n=2)                             # 13 blocks: more than the 8 spare
    assert eng.pool.stats.evictions > ev0
    h1 = eng.pool.stats.hit_blocks
    third = run(eng, first)
    assert eng.pool.stats.hit_blocks - h1 < eligible      # part of the prefix had to be recomputed
    assert third[0] == ref
