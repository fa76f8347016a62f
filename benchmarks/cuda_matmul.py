"""Device time of the CUDA matmul kernels (cuda/matmul.cu) on the shapes of Qwen2.5-0.5B.

Decode path (M = 1 and 8 rows, int8 dot products on q8_1 activations): GB/s of weight bytes
read, against the card's copy bandwidth. Prompt path (M = 512, tensor cores on weight tiles
dequantized to F16 in shared memory): TFLOP/s (2 * M * N * K / s). Device time by CUDA events,
the mean of --iters launches after 3 warm-ups. Timings depend on shapes, not values: the weights
are random bytes (NaN scales included), the activations normal values. Prints the device and
the host CPU; used by tests/gpu_check.sh.

    PYTHONPATH=python python3 benchmarks/cuda_matmul.py [--types Q4_K,Q8_0] [--iters 20]
"""
from __future__ import annotations

import argparse

import numpy as np

from localllm import _core, _harness
from localllm.quants import row_bytes
from machine import cpu_model

TYPES = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
# (name, N, K): Qwen2.5-0.5B's ffn gate/up, ffn down (K = 4864 is not a whole number of
# K-quant super-blocks: those types use the next multiple of 256) and the output head
SHAPES = [("ffn_up", 4864, 896), ("ffn_down", 896, 4864), ("output", 151936, 896)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if _core.cuda_device_count() == 0:
        raise SystemExit("no CUDA device (or _core built without CUDA)")
    print(f"device: {_core.cuda_device_name(0)}; host: {cpu_model()}")
    rng = np.random.default_rng(0)
    print(f"{'type':6} {'shape':9} {'N':>7} {'K':>5} {'M':>4} {'path':7} {'ms':>9} {'rate':>14}")
    for name in args.types.split(","):
        t = TYPES[name]
        for shape, N, K in SHAPES:
            if t >= 10:
                K = (K + 255) // 256 * 256
            w = rng.integers(0, 256, size=N * row_bytes(t, K), dtype=np.uint8)
            for M, path in ((1, "decode"), (8, "decode"), (512, "prompt")):
                x = rng.standard_normal((M, K)).astype(np.float32)
                ms = _harness.cuda_matmul_ms(w, t, N, K, x, path, args.iters)
                rate = (f"{w.nbytes / ms / 1e6:8.0f} GB/s" if path == "decode"
                        else f"{2 * M * N * K / ms / 1e9:8.1f} TFLOP/s")
                print(f"{name:6} {shape:9} {N:7} {K:5} {M:4} {path:7} {ms:9.4f} {rate:>14}", flush=True)


if __name__ == "__main__":
    main()
