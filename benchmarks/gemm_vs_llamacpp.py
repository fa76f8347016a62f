#!/usr/bin/env python3
"""One matrix multiplication per weight type, localllm's CPU kernels against llama.cpp's, in one run.

llama.cpp side: its own `test-backend-ops perf -o MUL_MAT`, compiled from the llama.cpp source of
the release the other benchmarks use (llamacpp_source.py fetches it) and linked against the
bench venv's libggml (llamacpp_venv.py), so it runs the very kernels llama-cpp-python runs
(tinyBLAS / repacked GEMMs as llama.cpp picks them). Its perf cases have a weight of 4096 x 14336
and 512 activation rows; test-backend-ops gives the CPU backend half the hardware threads.

localllm side: _harness.matmul (or the repacked path where this CPU repacks) on the same shape, the
same thread count, random weights of the type, the mean of --reps calls after one warm-up.

    python benchmarks/gemm_vs_llamacpp.py [--types q4_0,q5_0,q8_0,q4_K,q6_K,f16] [--reps 3]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "python")]

from localllm import _core, _harness# noqa: E402

import machine  # noqa: E402
from llamacpp_venv import ensure_venv  # noqa: E402
from llamacpp_source import ROOT, llama_cpp_source  # noqa: E402

N, K, M = 4096, 14336, 512
GGML_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
            "q2_K": 10, "q3_K": 11, "q4_K": 12, "q5_K": 13, "q6_K": 14}


def test_backend_ops() -> Path:
    """test-backend-ops built once against the bench venv's libggml."""
    exe = ROOT / "test-backend-ops"
    if exe.exists():
        return exe
    src = llama_cpp_source()
    py = ensure_venv()
    lib = Path(subprocess.check_output([str(py), "-c", "import llama_cpp, os; "
                                        "print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))"],
                                       text=True).strip())
    print(f"compiling test-backend-ops from {src} against {lib}", file=sys.stderr)
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{src}/ggml/include", f"-I{src}/ggml/src",
                    str(src / "tests" / "test-backend-ops.cpp"), "-o", str(exe), f"-L{lib}",
                    "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{lib}", "-lpthread"], check=True)
    return exe


def llamacpp_gflops(types: list[str]) -> dict[str, float]:
    pattern = f"type_a=({'|'.join(types)}),type_b=f32,m={N},n={M},k={K}"
    out = subprocess.run([str(test_backend_ops()), "perf", "-o", "MUL_MAT", "-b", "CPU", "-p", pattern],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines():
        m = re.search(rf"MUL_MAT\(type_a=(\w+),type_b=f32,m={N},n={M},k={K},.*?([\d.]+) GFLOPS", line)
        if m:
            found[m.group(1)] = float(m.group(2))
    return found


def localllm_gflops(name: str, threads: int, reps: int) -> float:
    wtype = GGML_IDS[name]
    rng = np.random.default_rng(0)
    rows = np.asarray(_core.quantize(rng.standard_normal(256 * K).astype(np.float32), wtype)).view(np.uint8)
    w = np.ascontiguousarray(np.tile(rows.reshape(256, -1), (N // 256, 1)))          # [N, row bytes]
    x = rng.standard_normal((M, K)).astype(np.float32)
    try:
        wp = _harness.repack_weight(w, wtype, N, K, threads)
        run = lambda: _harness.matmul_repacked(wp, wtype, N, K, x, threads, True)      # noqa: E731
    except ValueError:                                                               # not repacked here
        run = lambda: _harness.matmul(w, wtype, N, K, x, threads)                       # noqa: E731
    run()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    return 2 * M * N * K / ((time.perf_counter() - t0) / reps) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="q4_0,q5_0,q8_0,q4_K,q6_K,f16")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    types = args.types.split(",")
    threads = max(1, (os.cpu_count() or 2) // 2)          # what test-backend-ops gives the CPU
    print(machine.line(machine.describe(threads)))
    theirs = llamacpp_gflops(types)
    print(f"weight {N} x {K}, {M} activation rows, {threads} thread(s)\n")
    print("| type | localllm GFLOPS | llama.cpp GFLOPS | ratio |\n| --- | ---: | ---: | ---: |")
    for t in types:
        ours = localllm_gflops(t, threads, args.reps)
        ref = theirs.get(t)
        print(f"| {t} | {ours:.1f} | {ref if ref else 'n/a'} | {f'{ours / ref:.2f}x' if ref else '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
