"""Batch invariance: a sequence's logits are bit-identical whether it runs alone or beside other
sequences, at any batch size, position in the batch or prefill chunking; so are greedy outputs.

The prompts are those of llama.cpp's greedy reference (tests/data/reference/greedy.jsonl); the
other sequences of a batch are prompts of mixed lengths (3 to 150 tokens)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import greedy_rows, model_file
from localllm import _core
from localllm.engine import Engine
from localllm.sampling import SamplingParams
from localllm.text.tokenizer import Tokenizer
from localllm.gguf import GGUFFile

N_NEW = 12          # tokens generated per sequence (every step's logits are compared)
MODELS = ["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m"]


def make_engine(key: str, max_batch_tokens: int, max_running: int, kv_blocks: int = 512,
                cache: tuple[str, str] = ("f16", "f16")) -> Engine:
    path = str(model_file(key))
    model = _core.Model(path, 2, kv_blocks, 16, cache_type_k=cache[0], cache_type_v=cache[1])
    return Engine(model, Tokenizer.from_gguf_metadata(GGUFFile(path).metadata), n_ctx=4096,
                  max_batch_tokens=max_batch_tokens, max_running=max_running)


def run_batch(engine: Engine, prompts: list[list[int]]) -> list[tuple[list[int], np.ndarray]]:
    """Submit all prompts at once (greedy, exactly N_NEW tokens: EOS ignored, so every sequence
    stays in the batch); per prompt the output tokens and the logits of every step."""
    params = SamplingParams(max_tokens=N_NEW, temperature=0.0, seed=0, ignore_eos=True)
    ids = [engine.submit(p, params, keep_logits=True) for p in prompts]
    results = []
    for rid in ids:
        outs = list(engine.outputs(rid))
        toks = [t for o in outs for t in o.token_ids]
        results.append((toks, np.stack([o.logits for o in outs])))
    assert engine.pool.num_used == 0
    return results


def fillers(n: int, n_vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    lengths = [3, 150, 17, 64, 100, 5, 33, 120, 9, 80][:n] + [rng.randrange(3, 200) for _ in range(max(0, n - 10))]
    return [[rng.randrange(n_vocab) for _ in range(k)] for k in lengths]


@pytest.mark.parametrize("key,cache", [(m, ("f16", "f16")) for m in MODELS] +
                         [("smollm2-135m-q4_1", ("q8_0", "q4_0"))])   # a quantized KV cache
def test_logits_bit_identical_alone_and_in_batches(key, cache):
    prompts = [r["prompt_ids"] for r in greedy_rows(key)]
    assert len(prompts) >= 4

    alone_engine = make_engine(key, max_batch_tokens=512, max_running=1, cache=cache)
    alone = [run_batch(alone_engine, [p])[0] for p in prompts]
    n_vocab = alone_engine.n_vocab

    # Batches of 4: each reference prompt at a different position among 3 fillers, with a
    # small token budget so prompts are chunked and mixed with other sequences' decodes.
    small = make_engine(key, max_batch_tokens=24, max_running=4, cache=cache)
    others = fillers(3, n_vocab, seed=1)
    for i, p in enumerate(prompts):
        batch = list(others)
        batch.insert(i % 4, p)
        got = run_batch(small, batch)[i % 4]
        assert got[0] == alone[i][0], f"prompt {i}: greedy tokens differ in a batch of 4"
        assert np.array_equal(got[1], alone[i][1]), f"prompt {i}: logits differ in a batch of 4"

    # One batch of 16: every reference prompt plus fillers, shuffled, all running together.
    big = make_engine(key, max_batch_tokens=256, max_running=16, cache=cache)
    batch = prompts + fillers(16 - len(prompts), n_vocab, seed=2)
    order = list(range(16))
    random.Random(3).shuffle(order)
    results = run_batch(big, [batch[j] for j in order])
    assert big.stats.max_running_seen == 16
    for slot, j in enumerate(order):
        if j < len(prompts):
            assert results[slot][0] == alone[j][0], f"prompt {j}: greedy tokens differ in a batch of 16"
            assert np.array_equal(results[slot][1], alone[j][1]), f"prompt {j}: logits differ in a batch of 16"
