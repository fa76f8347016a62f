#!/usr/bin/env python3
"""What a forward of R rows costs at a given context: the decode step (R = 1) and the verify step
of speculative decoding (R = 1 + draft tokens), on one sequence whose first `ctx` positions are
in the cache. The difference between two contexts is the attention's share (the matmuls do not
depend on the context).

    python benchmarks/rows_cost.py [-m MODEL] [--ctx 128 896] [--rows 1 2 4 8 17] [-t 2] [-r 5]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "python")]

from localllm import _core, _harness, hub# noqa: E402

import machine  # noqa: E402

BLOCK = 16


def forward_ms(model, ctx: int, rows: int, reps: int) -> float:
    """Median ms of a forward of `rows` tokens at positions ctx .. ctx+rows-1 (the cache filled)."""
    n_blocks = (ctx + rows + BLOCK - 1) // BLOCK
    table = np.arange(n_blocks, dtype=np.int32).reshape(1, n_blocks)
    rng = np.random.default_rng(0)
    prefix = rng.integers(100, 1000, ctx).astype(np.int32)
    model.forward(prefix, np.arange(ctx, dtype=np.int32), np.zeros(ctx, np.int32), table,
                  np.array([ctx - 1], np.int32))
    toks = rng.integers(100, 1000, rows).astype(np.int32)
    pos = np.arange(ctx, ctx + rows, dtype=np.int32)
    seq, out = np.zeros(rows, np.int32), np.arange(rows, dtype=np.int32)
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        model.forward(toks, pos, seq, table, out)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times[1:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-0.5b-q4_k_m", help="a known name or a GGUF path")
    ap.add_argument("--ctx", type=int, nargs="+", default=[128, 896])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 17])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    m = machine.describe(args.threads)
    print(machine.line(m))
    attn = "AVX-512" if _harness.attention_avx512_available() else "AVX2" if _harness.attention_avx2_available() else "scalar"
    print(f"attention kernel: {attn}")
    path = args.model if Path(args.model).is_file() else hub.pull(args.model, quiet=True)
    blocks = (max(args.ctx) + max(args.rows) + BLOCK - 1) // BLOCK
    model = _core.Model(str(path), args.threads, blocks, BLOCK)
    result = {"machine": m, "model": args.model, "attention_kernel": attn, "ms": {}}
    for ctx in args.ctx:
        row = {r: forward_ms(model, ctx, r, args.repetitions) for r in args.rows}
        result["ms"][ctx] = row
        print(f"ctx {ctx}: " + ", ".join(f"{r} rows {ms:.1f} ms" for r, ms in row.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
