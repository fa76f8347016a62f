"""Output tokens/s with a JSON schema against unconstrained generation on the same prompts, at 1
and 16 concurrent sequences, and the per-step mask time (p50 / p99) and the time a step waited
for its masks after the forward (the part not hidden behind it).

    PYTHONPATH=python python benchmarks/structured.py [--model smollm2-135m-q4_1] [--tokens 128]
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


def run(llm: LLM, n: int, tokens: int, constrained: bool) -> float:
    extra = {"json_schema": SCHEMA} if constrained else {}
    requests = [llm.make_request(f"Shop inventory {i} as JSON:", temperature=0.8, seed=i, max_tokens=tokens,
                                 ignore_eos=not constrained, **extra) for i in range(n)]
    t0 = time.perf_counter()
    results = llm.generate(requests)
    elapsed = time.perf_counter() - t0
    return sum(len(r.token_ids) for r in results) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-q4_1")
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    print(line(describe(default_threads())))
    llm = LLM(str(hub.pull(args.model, quiet=True)), n_ctx=4096, seed=0)
    run(llm, 1, 8, True)                                   # builds the grammar tokenizer once
    for n in (1, 16):
        free = run(llm, n, args.tokens, False)
        c = llm.engine.constraints
        c.mask_seconds.clear()
        c.wait_seconds.clear()
        schema = run(llm, n, args.tokens, True)
        mask = np.array(c.mask_seconds) * 1e3
        wait = np.array(c.wait_seconds) * 1e3
        print(f"{args.model} n={n:2d}: unconstrained {free:7.1f} tok/s, json_schema {schema:7.1f} tok/s "
              f"({100 * schema / free:5.1f}%), mask/step p50 {np.percentile(mask, 50):.3f} ms "
              f"p99 {np.percentile(mask, 99):.3f} ms, waited after forward p99 {np.percentile(wait, 99):.3f} ms")


if __name__ == "__main__":
    main()
