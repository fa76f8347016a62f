"""Matrix-vector (decode) and matrix-matrix (prefill) throughput of localllm's CPU kernels.

Decode shape: one activation row times a weight matrix much larger than the last-level cache
(default 1.2 GB of weight bytes, K = 4096), so every call streams the weights from DRAM; the
figure of merit is GB/s of weight bytes, compared with the machine's streaming read bandwidth
measured in the same run by _harness.read_bandwidth (a C++ loop on the same thread pool).
Prefill shape: M = 512 activation rows, N = K = 4096, reported in GOP/s (2 * M * N * K / s).

Weights are random valid blocks (gguf-py quantization of normal values for the legacy and
float types, random bytes with sane f16 scales for the K-quants), tiled to the requested size.
Timings are the best of --reps calls (the machine may be shared; the best call is the one
least disturbed), and each type's kernel runs are interleaved with read-bandwidth runs so that
its percentage compares measurements taken under the same load. On a machine shared with other
work, --clock cpu times both by CPU time instead (process CPU time / threads for the kernels,
per-thread CPU time for the read loop): what the threads achieve while they actually run.

    PYTHONPATH=python python3 benchmarks/matvec.py [--types Q4_0,Q4_K] [--gb 1.2] [--threads 2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

from localllm import _core, _harness
from machine import describe, line as machine_line

__all__ = ["main", "make_weight_tile", "tiled_weights"]

DEFAULT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                 "F16", "BF16", "F32"]
KQUANTS = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K}
# The low-bit i-quants: every bit pattern is a valid block; the f16 super-scale comes first.
IQ_LOWBIT = {T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S}


def row_bytes(t: T, k: int) -> int:
    """Bytes of one row of k elements of type t."""
    block, size = GGML_QUANT_SIZES[t]
    return k // block * size


def make_weight_tile(t: T, rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[rows, row_bytes] uint8: random valid weight rows of type t."""
    if t in KQUANTS:
        size = GGML_QUANT_SIZES[t][1]
        raw = rng.integers(0, 256, size=(rows * k // 256, size), dtype=np.uint8)
        d = rng.uniform(0.002, 0.05, size=(raw.shape[0], 2)).astype(np.float16).view(np.uint8)
        if t in (T.Q4_K, T.Q5_K):
            raw[:, 0:4] = d
        elif t == T.Q2_K:
            raw[:, 80:84] = d
        else:
            raw[:, size - 2:] = d[:, :2]
        return raw.reshape(rows, -1)
    if t in IQ_LOWBIT or t == T.IQ4_NL:   # every bit pattern is a block; gguf-py has no quantizer
        block, size = GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(rows * k // block, size), dtype=np.uint8)
        raw[:, 0:2] = rng.uniform(0.002, 0.05, size=(raw.shape[0], 1)).astype(np.float16).view(np.uint8)
        return raw.reshape(rows, -1)
    w = (rng.standard_normal((rows, k)) * 0.05).astype(np.float32)
    if t == T.F32:
        return w.view(np.uint8)
    return np.ascontiguousarray(quantize(w, t)).view(np.uint8).reshape(rows, -1)


def tiled_weights(t: T, n_rows: int, k: int, rng: np.random.Generator, tile_rows: int = 256) -> np.ndarray:
    """[n_rows, row_bytes] uint8 made by repeating a tile of random valid rows."""
    tile = make_weight_tile(t, tile_rows, k, rng)
    reps = -(-n_rows // tile_rows)
    return np.ascontiguousarray(np.tile(tile, (reps, 1))[:n_rows])


CPU_CLOCK = False   # set by --clock cpu
THREADS = 2


def best_time(fn, reps: int) -> float:
    """Best time of reps calls (after one warm-up call): wall time, or with --clock cpu the
    process CPU time divided by the thread count."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = min(best, cpu / THREADS if CPU_CLOCK else wall)
    return best


def _decode_matmul(t: T, n: int, k: int, w: np.ndarray, x: np.ndarray, threads: int):
    """The one-row matmul a model runs: through repacked panels where the type is repacked on
    this CPU (the model's layout), else over the GGUF rows. Returns (call, weight bytes)."""
    try:
        packed = _harness.repack_weight(w, int(t), n, k, threads)
        return (lambda: _harness.matmul_repacked(packed, int(t), n, k, x, threads, prepacked=True)), packed.nbytes
    except ValueError:
        return (lambda: _harness.matmul(w, int(t), n, k, x, threads)), w.nbytes


def bench_decode(t: T, k: int, gbytes: float, threads: int, reps: int,
                 rng: np.random.Generator) -> tuple[float, float, float]:
    """(kernel GB/s of weight bytes, read bandwidth GB/s measured alongside, kernel GB/s with the
    weights resident in L2) for one activation row times a weight matrix. The first streams a
    gbytes-sized matrix from DRAM (kernel and read-loop runs alternate); the last is the
    kernel's compute ceiling: if it is not well above the read bandwidth, decoding is bound by
    the kernel's instructions rather than by memory."""
    x = rng.standard_normal((1, k)).astype(np.float32)
    n = int(gbytes * 1e9) // row_bytes(t, k)
    call, nbytes = _decode_matmul(t, n, k, tiled_weights(t, n, k, rng), x, threads)
    kernel, read = 0.0, 0.0
    for _ in range(2):
        read = max(read, _harness.read_bandwidth(nbytes, threads, max(1, reps // 2), CPU_CLOCK))
        secs = best_time(call, max(1, reps // 2))
        kernel = max(kernel, nbytes / secs / 1e9)
    n_l2 = max(16, int(0.5e6 * threads) // row_bytes(t, k) // 16 * 16)   # 0.5 MB a thread
    call, nbytes = _decode_matmul(t, n_l2, k, tiled_weights(t, n_l2, k, rng), x, threads)
    calls = 200
    secs = best_time(lambda: [call() for _ in range(calls)], 10 * reps) / calls
    return kernel, read, nbytes / secs / 1e9


def bench_prefill(t: T, m: int, n: int, k: int, threads: int, reps: int, rng: np.random.Generator) -> float:
    """GOP/s (2 M N K / s) of an [M, K] x [N, K]^T matmul."""
    w = tiled_weights(t, n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    secs = best_time(lambda: _harness.matmul(w, int(t), n, k, x, threads), reps)
    return 2.0 * m * n * k / secs / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES), help="comma-separated weight types")
    ap.add_argument("--gb", type=float, default=1.2, help="decode weight matrix size in GB (>= 4x L3)")
    ap.add_argument("--k", type=int, default=4096, help="row length K")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--prefill-m", type=int, default=512, help="activation rows of the prefill shape (0: skip)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: time by CPU time (for a machine shared with other work)")
    args = ap.parse_args()
    global CPU_CLOCK, THREADS
    CPU_CLOCK, THREADS = args.clock == "cpu", args.threads
    types = [T[name.strip()] for name in args.types.split(",") if name.strip()]
    rng = np.random.default_rng(0)

    isa = _core.isa_name(_core.best_isa())
    bw = _harness.read_bandwidth(int(args.gb * 1e9), args.threads, args.reps, CPU_CLOCK)
    lat = _harness.threadpool_dispatch_ns(args.threads, 2000)
    lat_busy = _harness.threadpool_dispatch_ns(args.threads, 2000, 20000.0)
    print(machine_line(describe(args.threads, read_bw_gbs=bw)))
    print(f"kernels: {isa}; threads: {args.threads}; K = {args.k}; decode weights: {args.gb:.2f} GB; "
          f"clock: {args.clock}")
    print(f"streaming read bandwidth ({args.threads} threads): {bw:.1f} GB/s")
    print(f"thread-pool dispatch overhead: {lat / 1000:.2f} us (empty job), "
          f"{lat_busy / 1000:.2f} us (20 us of work per thread)\n")

    print("type | GB/s | % of read bandwidth | read GB/s (same time) | GB/s from L2 (compute ceiling)")
    print("--- | --- | --- | --- | ---")
    for t in types:
        gbs, read, l2 = bench_decode(t, args.k, args.gb, args.threads, args.reps, rng)
        print(f"{t.name} | {gbs:.1f} | {100 * gbs / read:.0f}% | {read:.1f} | {l2:.1f}", flush=True)

    if args.prefill_m > 0:
        print(f"\nprefill: M = {args.prefill_m}, N = K = {args.k}\n")
        print("type | GOP/s")
        print("--- | ---")
        for t in types:
            gops = bench_prefill(t, args.prefill_m, args.k, args.k, args.threads, max(2, args.reps // 2), rng)
            print(f"{t.name} | {gops:.1f}", flush=True)


if __name__ == "__main__":
    main()
