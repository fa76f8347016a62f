#!/usr/bin/env python3
"""localllm vs llama.cpp on the same GGUF files, same threads, same pp/tg, in one run.

llama.cpp is llama-cpp-python (which builds llama.cpp from source with native CPU flags),
installed once into a cache venv (~/.cache/localllm/bench-venv). Each repetition runs one fresh
process per engine, alternating engines, so load time (file to first logits) and peak RSS are
measured per process, and machine noise hits both alike. The machine's read bandwidth is
measured just before and after each worker for the decode bound (bytes per token / bandwidth):
each repetition's tg is set against the bandwidth of its own minute.

    python benchmarks/compare_llamacpp.py [-m MODEL ...] [-t 2] [-p 512] [-n 128] [-r 3] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from llamacpp_venv import DEFAULT_MODELS, ensure_venv
from machine import describe, line as machine_line

# ---- workers: run inside a fresh process, print one JSON line ----

def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). ru_maxrss would carry the parent's peak across exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rand_tokens(n: int, n_vocab: int, seed: int) -> list[int]:
    import random
    r = random.Random(seed)
    return [r.randrange(n_vocab) for _ in range(n)]


def worker_llamacpp(path: str, threads: int, n_prompt: int, n_gen: int) -> dict:
    """llama.cpp through llama-cpp-python's C API (no Python-side logits copies)."""
    import ctypes
    import llama_cpp as L
    t0 = time.perf_counter()
    L.llama_backend_init()
    quiet = L.llama_log_callback(lambda level, text, data: None)     # kept alive: C holds it
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    cp.n_ctx = max(n_prompt, n_gen) + 64
    cp.n_batch = cp.n_ubatch = max(n_prompt, 1)
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(max(n_prompt, 1), 0, 1)

    def decode(tokens: list[int], start: int) -> None:
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, int(i == len(tokens) - 1)
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def clear() -> None:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)

    decode([0], 0)
    out = {"load_s": time.perf_counter() - t0}
    clear()
    decode(_rand_tokens(16, n_vocab, 1), 0)              # warm-up
    clear()
    toks = _rand_tokens(n_prompt, n_vocab, 2)
    t0 = time.perf_counter_ns()
    decode(toks, 0)
    out["pp_ns"] = time.perf_counter_ns() - t0
    clear()
    toks = _rand_tokens(n_gen, n_vocab, 3)
    t0 = time.perf_counter_ns()
    for i, t in enumerate(toks):
        decode([t], i)
    out["tg_ns"] = time.perf_counter_ns() - t0
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def worker_localllm(path: str, threads: int, n_prompt: int, n_gen: int, numerics: str = "fast") -> dict:
    import numpy as np
    from localllm import LLM
    from localllm.bench import bench_generation, bench_prompt
    t0 = time.perf_counter()
    llm = LLM(path, n_threads=threads, n_ctx=max(n_prompt, n_gen) + 64, n_batch=max(n_prompt, 1),
              numerics=numerics)
    llm.logits([0])
    out = {"load_s": time.perf_counter() - t0}
    rng = np.random.default_rng(0)
    bench_prompt(llm, 16, rng)                                          # warm-up
    out["pp_ns"] = bench_prompt(llm, n_prompt, rng)
    out["tg_ns"] = bench_generation(llm, n_gen, rng)
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def run_worker(python: str, engine: str, path: str, args) -> dict:
    cmd = [python, __file__, "--worker", engine, "--path", path, "-t", str(args.threads),
           "-p", str(args.n_prompt), "-n", str(args.n_gen), "--numerics", args.numerics]
    # numpy's OpenBLAS threads (both engines import numpy) spin on the cores the engine uses, at
    # startup and after any BLAS call; localllm turns them off itself, llama-cpp-python does not.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} worker failed on {path}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_bandwidth_gbs(threads: int) -> float:
    from localllm import _harness
    return max(_harness.read_bandwidth(1 << 30, threads) for _ in range(3))   # GB/s


def bytes_per_token(path: str) -> int:
    """Weight bytes read per decoded token: every matrix multiplied (not the embedding table,
    of which one row is read, unless it is also the tied output matrix)."""
    from localllm.gguf import GGUFFile
    f = GGUFFile(path)
    names = {t.name for t in f.tensors}
    tied = "output.weight" not in names
    return sum(t.nbytes for t in f.tensors if t.name != "token_embd.weight" or tied)


def summarize(samples: list[dict], key: str, n: int) -> tuple[float, float]:
    ts = [n * 1e9 / s[key] for s in samples]
    return statistics.fmean(ts), (statistics.stdev(ts) if len(ts) > 1 else 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--numerics", choices=["fast", "llama.cpp"], default="fast",
                    help="localllm's float order (llama.cpp: bit-identical logits, slower prompts)")
    ap.add_argument("--worker", choices=["llamacpp", "localllm"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        if args.worker == "llamacpp":
            res = worker_llamacpp(args.path, args.threads, args.n_prompt, args.n_gen)
        else:
            res = worker_localllm(args.path, args.threads, args.n_prompt, args.n_gen, args.numerics)
        print(json.dumps(res))
        return 0

    from localllm import hub
    venv_py = str(ensure_venv())
    machine = describe(args.threads, venv_py)
    print(machine_line(machine), flush=True)
    results = []
    for name in args.model or DEFAULT_MODELS:
        path = str(hub.resolve_model(name))
        runs = {"llamacpp": [], "localllm": []}
        nbytes = bytes_per_token(path)
        for _ in range(args.repetitions):
            for engine in ("llamacpp", "localllm"):
                # The host's bandwidth drifts by +-20% over minutes: each worker's decode is set
                # against the bandwidth read just before and just after it.
                bw_before = read_bandwidth_gbs(args.threads)
                sample = run_worker(venv_py if engine == "llamacpp" else sys.executable, engine, path, args)
                sample["read_bw_gbs"] = (bw_before + read_bandwidth_gbs(args.threads)) / 2
                sample["tg_of_bound"] = args.n_gen * 1e9 / sample["tg_ns"] * nbytes / (sample["read_bw_gbs"] * 1e9)
                runs[engine].append(sample)
        adjacent_bw = [s["read_bw_gbs"] for samples in runs.values() for s in samples]
        row = {"model": name, "threads": args.threads, "read_bw_gbs": statistics.fmean(adjacent_bw),
               "bytes_per_token": nbytes}
        for engine, samples in runs.items():
            row[engine] = {
                "pp": summarize(samples, "pp_ns", args.n_prompt), "tg": summarize(samples, "tg_ns", args.n_gen),
                "tg_of_bound": [s["tg_of_bound"] for s in samples],
                "load_s": statistics.fmean(s["load_s"] for s in samples),
                "peak_rss_mb": max(s["peak_rss_mb"] for s in samples),
            }
        row["tg_bound"] = row["read_bw_gbs"] * 1e9 / nbytes
        results.append(row)
        print_row(row, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0


def print_row(row: dict, args) -> None:
    a, b = row["localllm"], row["llamacpp"]
    print(f"\n### {row['model']} ({args.threads} threads, localllm numerics {args.numerics}; decode bound {row['tg_bound']:.1f} t/s "
          f"at a mean {row['read_bw_gbs']:.1f} GB/s)")
    print("| test | localllm t/s | llama.cpp t/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
        if n == 0:
            continue
        print(f"| {test}{n} | {a[test][0]:.1f} ± {a[test][1]:.1f} | {b[test][0]:.1f} ± {b[test][1]:.1f} | "
              f"{a[test][0] / b[test][0]:.2f}x |")
    def of_bound(e: dict) -> str:   # mean of the repetitions, each against its adjacent bandwidth
        f = e["tg_of_bound"]
        return f"{100 * statistics.fmean(f):.0f}% ({100 * min(f):.0f}-{100 * max(f):.0f})"
    if args.n_gen:
        print(f"| tg % of bound | {of_bound(a)} | {of_bound(b)} | |")
    print(f"| load s | {a['load_s']:.2f} | {b['load_s']:.2f} | |")
    print(f"| peak RSS MB | {a['peak_rss_mb']:.0f} | {b['peak_rss_mb']:.0f} | |")


if __name__ == "__main__":
    sys.exit(main())
