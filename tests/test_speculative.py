"""Speculative decoding is lossless under greedy decoding: with n-gram lookup or a draft model,
every prompt of llama.cpp's greedy reference (tests/data/reference/greedy.jsonl) gives the same
tokens as plain decoding and, for each emitted token, bit for bit the logits plain decoding
sampled it from; alone and inside a batch of 16 where speculating and plain sequences mix.

The draft model of each target is the same model re-quantized to Q4_0 (tests/derived_models.py):
one vocabulary, close but not equal predictions, so drafts are both accepted and rejected."""
from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import greedy_rows, model_file
from derived_models import derived_model
from localllm import _core
from localllm.engine import Engine
from localllm.gguf import GGUFFile
from localllm.sampling import SamplingParams
from localllm.engine.speculative import DraftModelProposer, NgramProposer, SpecConfig, check_same_vocab
from localllm.text.tokenizer import Tokenizer

N_NEW = 48
MODELS = ["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m"]
_TARGETS: dict = {}
_PLAIN: dict = {}


def target(key: str):
    if key not in _TARGETS:
        path = str(model_file(key))
        _TARGETS[key] = (_core.Model(path, 2, 700, 16), Tokenizer.from_gguf_metadata(GGUFFile(path).metadata))
    return _TARGETS[key]


def make_engine(key: str, proposer=None, max_running: int = 1, max_batch_tokens: int = 512) -> Engine:
    model, tok = target(key)
    return Engine(model, tok, n_ctx=4096, max_batch_tokens=max_batch_tokens, max_running=max_running,
                  proposer=proposer)


def run(engine: Engine, prompts: list[list[int]], speculate: list[bool] | None = None):
    """Greedy, exactly N_NEW tokens each (EOS ignored); per prompt the tokens and the logits row
    each token was sampled from."""
    params = SamplingParams(max_tokens=N_NEW, temperature=0.0, seed=0, ignore_eos=True)
    speculate = speculate or [engine.proposer is not None] * len(prompts)
    ids = [engine.submit(p, params, keep_logits=True, speculate=s) for p, s in zip(prompts, speculate)]
    results = []
    for rid in ids:
        outs = list(engine.outputs(rid))
        results.append(([t for o in outs for t in o.token_ids], np.stack([o.logits for o in outs])))
    assert engine.pool.num_used == 0, "blocks left referenced after every request finished"
    return results


def plain(key: str):
    if key not in _PLAIN:
        engine = make_engine(key)
        _PLAIN[key] = [run(engine, [r["prompt_ids"]])[0] for r in greedy_rows(key)]
    return _PLAIN[key]


def assert_same(got, want, what: str) -> None:
    assert got[0] == want[0], f"{what}: tokens differ from plain decoding"
    assert got[1].shape == want[1].shape and np.array_equal(got[1], want[1]), \
        f"{what}: the logits a token was sampled from differ from plain decoding"


def check_lossless(key: str, make_proposer) -> None:
    prompts = [r["prompt_ids"] for r in greedy_rows(key)]
    want = plain(key)
    alone = make_engine(key, make_proposer())
    for i, p in enumerate(prompts):
        assert_same(run(alone, [p])[0], want[i], f"prompt {i} alone")
    s = alone.stats
    assert s.spec_drafted > 0 and 0 < s.spec_accepted < s.spec_drafted, "drafts never accepted or never rejected"
    assert s.steps < len(prompts) * (N_NEW + 1), "speculation saved no step"

    # 16 sequences: the reference prompts (speculating) among fillers, every other one plain.
    n_vocab = alone.n_vocab
    rng = random.Random(7)
    fillers = [[rng.randrange(n_vocab) for _ in range(rng.randrange(3, 120))] for _ in range(16 - len(prompts))]
    batch = prompts + fillers
    order = list(range(16))
    rng.shuffle(order)
    big = make_engine(key, make_proposer(), max_running=16, max_batch_tokens=256)
    results = run(big, [batch[j] for j in order], [j < len(prompts) or j % 2 == 0 for j in order])
    assert big.stats.max_running_seen == 16
    for slot, j in enumerate(order):
        if j < len(prompts):
            assert_same(results[slot], want[j], f"prompt {j} in a batch of 16")


@pytest.mark.parametrize("key", MODELS)
def test_ngram_lookup_greedy_equals_plain_decoding(key):
    check_lossless(key, lambda: NgramProposer(SpecConfig(mode="ngram")))


@pytest.mark.parametrize("key", MODELS)
def test_draft_model_greedy_equals_plain_decoding(key):
    draft_path = str(derived_model(key, "q4_0"))
    check_same_vocab(GGUFFile(str(model_file(key))).metadata, GGUFFile(draft_path).metadata, key, draft_path)
    draft = _core.Model(draft_path, 2, 700, 16)
    # p_min 0: always draft_max tokens, so drafts get rejected too (p_min is covered in test_spec_surfaces)
    config = SpecConfig(mode="draft", draft_model=draft_path, draft_max=6, draft_p_min=0.0)
    check_lossless(key, lambda: DraftModelProposer(draft, config, max_batch_tokens=512))


def test_draft_model_prefills_with_the_prompt():
    """The draft model is fed each prompt chunk in the step the target computes it, so its share
    of the prompt is paid before the first token: the first proposal only drafts."""
    key = "smollm2-135m-q4_1"
    draft_path = str(derived_model(key, "q4_0"))
    seen = []

    class Recording(DraftModelProposer):
        def propose(self, seqs, limits):
            seen.extend((len(s.spec_state.fed) if s.spec_state else 0, len(s.tokens)) for s in seqs)
            super().propose(seqs, limits)

    config = SpecConfig(mode="draft", draft_model=draft_path, draft_max=4, draft_p_min=0.0)
    proposer = Recording(_core.Model(draft_path, 2, 700, 16), config, max_batch_tokens=64)
    prompt = (greedy_rows(key)[0]["prompt_ids"] * 40)[:150]         # three chunks of up to 64 tokens
    engine = make_engine(key, proposer, max_batch_tokens=64)
    (tokens, _), = run(engine, [prompt])
    assert tokens == run(make_engine(key, max_batch_tokens=64), [prompt])[0][0]
    fed, n_tokens = seen[0]
    assert n_tokens == len(prompt) + 1 and fed == len(prompt), \
        f"at the first proposal the draft had {fed} of the {len(prompt)} prompt tokens"


def test_draft_model_reuses_its_prefix_cache():
    """A prompt the draft model has seen is not prefilled by it again: its full blocks come from
    the draft's prefix cache, so the second run feeds the draft exactly those tokens fewer, and
    drafts (and output) stay the same."""
    key = "smollm2-135m-q4_1"
    draft_path = str(derived_model(key, "q4_0"))

    class Counting(DraftModelProposer):
        fed = 0

        def _forward(self, batch):
            Counting.fed += sum(len(toks) for _, toks, _ in batch)
            return super()._forward(batch)

    config = SpecConfig(mode="draft", draft_model=draft_path, draft_max=4, draft_p_min=0.0)
    proposer = Counting(_core.Model(draft_path, 2, 700, 16), config, max_batch_tokens=64)
    engine = make_engine(key, proposer, max_batch_tokens=64)
    prompt = (greedy_rows(key)[0]["prompt_ids"] * 40)[:150]
    want = run(make_engine(key, max_batch_tokens=64), [prompt])[0]
    fed = []
    for _ in range(2):
        Counting.fed = 0
        assert_same(run(engine, [prompt])[0], want, "draft with a prefix cache")
        fed.append(Counting.fed)
    bs = proposer.pool.block_size
    hit = (len(prompt) - 1) // bs * bs
    assert proposer.pool.stats.hit_tokens == hit, "the second run did not find the prompt in the draft's cache"
    assert fed[1] == fed[0] - hit, f"draft fed {fed} tokens in the two runs, expected {hit} fewer the second time"
    assert proposer.pool.num_used == 0 and proposer.pool.num_cached > 0


def test_incompatible_draft_vocabulary_is_refused():
    smol = GGUFFile(str(model_file("smollm2-135m-q4_1"))).metadata
    qwen = GGUFFile(str(model_file("qwen2.5-coder-0.5b-q4_k_m"))).metadata
    with pytest.raises(ValueError, match="vocabular"):
        check_same_vocab(qwen, smol, "qwen", "smollm2")
    with pytest.raises(ValueError, match="vocabular"):
        check_same_vocab(smol, qwen, "smollm2", "qwen")
