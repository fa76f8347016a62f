"""Output tokens/s with a JSON schema against unconstrained generation on the same prompts, at 1
and 16 concurrent sequences, and the per-step mask time (p50 / p99) and the time a step waited
for its masks after the forward (the part not hidden behind it).

Both runs generate the same number of tokens per sequence: the constrained run first (it stops
where its JSON is complete), then the unconstrained one with each sequence's max_tokens set to
the constrained length (ignore_eos), so the batch holds the same sequences at every step and
prompt processing weighs the same in both. The pair is repeated (--reps) and the medians are
reported, the machine being shared. --overlap compares computing the masks beside the forward
(on a helper thread) with computing them before it.

    PYTHONPATH=python python benchmarks/structured.py [--model smollm2-135m-q4_1] [--tokens 64] [--reps 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from machine import describe, line

from localllm import LLM, hub
from localllm.llm import default_threads

SCHEMA = {"type": "object", "properties": {
    "items": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "price": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "price", "tags"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}


def prompt(i: int) -> str:
    return f"Shop inventory {i} as JSON:"


def timed(llm: LLM, requests: list) -> tuple[float, list[int]]:
    """tok/s of generating the requests together, and each one's number of tokens."""
    t0 = time.perf_counter()
    results = llm.generate(requests)
    elapsed = time.perf_counter() - t0
    lengths = [len(r.token_ids) for r in results]
    return sum(lengths) / elapsed, lengths


def pair(llm: LLM, n: int, tokens: int, rep: int) -> tuple[float, float]:
    """(unconstrained tok/s, json_schema tok/s) on the same prompts and token counts."""
    constrained = [llm.make_request(prompt(i), temperature=0.8, seed=100 * rep + i, max_tokens=tokens,
                                    json_schema=SCHEMA) for i in range(n)]
    schema_tps, lengths = timed(llm, constrained)
    free = [llm.make_request(prompt(i), temperature=0.8, seed=100 * rep + i, max_tokens=length, ignore_eos=True)
            for i, length in enumerate(lengths)]
    free_tps, free_lengths = timed(llm, free)
    assert free_lengths == lengths, (free_lengths, lengths)
    return free_tps, schema_tps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-q4_1")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--overlap", choices=("default", "both"), default="default",
                    help="both: also measure the other mask placement (beside / before the forward)")
    args = ap.parse_args()
    print(line(describe(default_threads())))
    llm = LLM(str(hub.pull(args.model, quiet=True)), n_ctx=4096, seed=0)
    c = llm.engine.constraints
    placements = [c.overlap] if args.overlap == "default" else [c.overlap, not c.overlap]
    llm.generate("warm up", max_tokens=8, json_schema=SCHEMA)        # builds the grammar tokenizer once
    for n in (1, 16):
        for overlap in placements:
            c.overlap = overlap
            c.mask_seconds.clear()
            c.wait_seconds.clear()
            runs = np.array([pair(llm, n, args.tokens, rep) for rep in range(args.reps)])
            free, schema = np.median(runs[:, 0]), np.median(runs[:, 1])
            ratio = np.median(runs[:, 1] / runs[:, 0])
            mask = np.array(c.mask_seconds) * 1e3
            wait = np.array(c.wait_seconds or [0.0]) * 1e3
            print(f"{args.model} n={n:2d} masks {'beside' if overlap else 'before'} the forward: "
                  f"unconstrained {free:7.1f} tok/s, json_schema {schema:7.1f} tok/s (median ratio "
                  f"{100 * ratio:5.1f}%, {args.reps} pairs), mask/step p50 {np.percentile(mask, 50):.3f} ms "
                  f"p99 {np.percentile(mask, 99):.3f} ms, waited after forward p99 {np.percentile(wait, 99):.3f} ms")
    c.overlap = placements[0]


if __name__ == "__main__":
    main()
