#!/usr/bin/env python3
"""Batched decoding: aggregate decode tokens/s at 1, 4, 16, 64 concurrent sequences, localllm's
engine next to llama.cpp's batched decoding, measured in the same run on the same GGUF files.

Method. Each (engine, model) runs in a fresh process with the same thread count. For each
concurrency N: N prompts of P random token ids (same ids for both engines) are prefilled, then
G decode steps follow in which every sequence adds one token; the timed part is those G steps,
and the figure is N * G / seconds (prefill excluded). Tokens are the argmax (greedy) of each
sequence's own logits, end-of-generation tokens banned so every sequence runs G steps.

- localllm: `Engine` (continuous batching, paged KV, one `forward` per step for all sequences,
  per-sequence sampling in Python included in the time); the pool is sized for N * (P + G)
  tokens; peak blocks used and KV bytes are read from the pool.
- llama.cpp: llama-cpp-python's low-level API (llama.cpp built from source with native flags,
  installed into ~/.cache/localllm/bench-venv): one context with n_seq_max = N and N * (P + G)
  KV cells (llama.cpp's default: one stream per sequence; LOCALLLM_LLAMACPP_KV_UNIFIED=1 for
  one shared cache), one `llama_batch` per step holding one token of each sequence,
  `llama_decode`, argmax of `llama_get_logits_ith` per sequence in numpy. Its KV cache is
  allocated up front for all cells (F16), reported as such. It runs as its own tools run it
  (OpenMP's default waiting; the AMX tile permission asked for first, see llamacpp_venv.py).

Each engine runs -r times, alternating which goes first; the best run per N is reported (the
least disturbed by other jobs on a shared machine) and every run is kept in the JSON.

    PYTHONPATH=python python3 benchmarks/batched.py [-m MODEL ...] [-t 2] [-N 1 4 16 64] [-p 32] [-g 32] [-r 2]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from llamacpp_venv import DEFAULT_MODELS, ensure_venv
from machine import describe, line as machine_line

BLOCK = 16

def prompts_for(n: int, length: int, n_vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, n_vocab - 100) for _ in range(length)] for _ in range(n)]


# ---- workers (each runs in its own process and prints one JSON line) ----

def worker_localllm(path: str, threads: int, ns: list[int], n_prompt: int, n_gen: int) -> list[dict]:
    from localllm import _core
    from localllm.engine import Engine
    from localllm.gguf import GGUFFile
    from localllm.sampling import SamplingParams
    from localllm.text.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf_metadata(GGUFFile(path).metadata)
    rows = []
    for n in ns:
        ctx = n_prompt + n_gen + 1
        blocks = n * -(-ctx // BLOCK) + 1
        model = _core.Model(path, threads, blocks, BLOCK)
        # Budget for all prompts at once: the prefill is one step, every later step pure decode.
        engine = Engine(model, tok, n_ctx=ctx, max_batch_tokens=max(512, n * n_prompt), max_running=n)
        ban = {t: float("-inf") for t in tok.eot_ids}
        params = SamplingParams(max_tokens=n_gen + 1, temperature=0.0, logit_bias=ban, seed=0)
        warm = engine.submit([1, 2, 3, 4], SamplingParams(max_tokens=2, temperature=0.0, seed=0))
        list(engine.outputs(warm))
        ids = [engine.submit(p, params) for p in prompts_for(n, n_prompt, engine.n_vocab, seed=n)]
        t0 = time.perf_counter()
        while any(engine.times(i).first_token is None for i in ids):   # prefill (not timed)
            engine.step()
        t_prefill = time.perf_counter() - t0
        decoded0, t0 = engine.stats.decode_tokens, time.perf_counter()
        while engine.has_unfinished():
            engine.step()
        dt = time.perf_counter() - t0
        decoded = engine.stats.decode_tokens - decoded0
        state = engine.pool_state()
        rows.append({"n": n, "decode_tokens": decoded, "decode_s": dt, "tps": decoded / dt,
                     "prefill_s": t_prefill, "peak_blocks": state["peak_used"],
                     "kv_peak_mb": state["peak_kv_bytes"] / 2 ** 20,
                     "kv_pool_mb": model.kv_bytes / 2 ** 20})
        assert decoded == n * n_gen, (decoded, n * n_gen)
    return rows


def worker_llamacpp(path: str, threads: int, ns: list[int], n_prompt: int, n_gen: int) -> list[dict]:
    import ctypes
    import numpy as np
    import llama_cpp as L

    L.llama_backend_init()
    quiet = L.llama_log_callback(lambda level, text, data: None)    # kept alive: C holds it
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    rows = []
    for n in ns:
        cells = n * (n_prompt + n_gen + 1)
        cp = L.llama_context_default_params()
        cp.n_ctx = cells
        cp.n_batch = cp.n_ubatch = max(512, n * n_prompt)
        cp.n_seq_max = n
        cp.n_threads = cp.n_threads_batch = threads
        # Unified (one cache all sequences attend into, masked) or one stream per sequence
        # (llama.cpp's default): LOCALLLM_LLAMACPP_KV_UNIFIED=1 picks the former.
        cp.kv_unified = os.environ.get("LOCALLLM_LLAMACPP_KV_UNIFIED", "0") == "1"
        ctx = L.llama_init_from_model(model, cp)
        batch = L.llama_batch_init(max(n * n_prompt, n), 0, n)

        def decode(entries, batch=batch, ctx=ctx):   # entries: (token, pos, seq, wants_logits)
            batch.n_tokens = len(entries)
            for i, (t, p, s, lg) in enumerate(entries):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
                batch.seq_id[i][0], batch.logits[i] = s, int(lg)
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")

        def argmax(i, ctx=ctx):
            return int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).argmax())

        decode([(t, p, 0, True) for p, t in enumerate([1, 2, 3, 4])])           # warm-up
        decode([(5, 4, 0, True)])
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        prompts = prompts_for(n, n_prompt, n_vocab, seed=n)
        t0 = time.perf_counter()
        decode([(t, p, s, p == n_prompt - 1) for s, pr in enumerate(prompts) for p, t in enumerate(pr)])
        nxt = [argmax((s + 1) * n_prompt - 1) for s in range(n)]
        t_prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        for g in range(n_gen):
            decode([(nxt[s], n_prompt + g, s, True) for s in range(n)])
            nxt = [argmax(s) for s in range(n)]
        dt = time.perf_counter() - t0
        rows.append({"n": n, "decode_tokens": n * n_gen, "decode_s": dt, "tps": n * n_gen / dt,
                     "prefill_s": t_prefill, "kv_cells": cells})
        L.llama_batch_free(batch)
        L.llama_free(ctx)
    L.llama_model_free(model)
    return rows


def run_worker(python: str, engine: str, path: str, args) -> list[dict]:
    cmd = [python, __file__, "--worker", engine, "--path", path, "-t", str(args.threads),
           "-p", str(args.n_prompt), "-g", str(args.n_gen), "-N", *map(str, args.concurrency)]
    # llama.cpp runs as its own tools run it: OpenMP's default (spinning) waits. The engines run
    # one at a time, so neither spins against the other.
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} worker failed on {path}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kv_bytes_per_token(path: str) -> int:
    from localllm import _core
    hp = _core.Model(path, 1, 2, BLOCK).hparams
    return hp["n_layer"] * 2 * hp["n_head_kv"] * hp["head_dim"] * 2     # K and V, F16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-N", "--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("-p", "--n-prompt", type=int, default=32)
    ap.add_argument("-g", "--n-gen", type=int, default=32)
    ap.add_argument("-r", "--repetitions", type=int, default=2, help="runs per engine (best is reported)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--worker", choices=["llamacpp", "localllm"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        fn = worker_llamacpp if args.worker == "llamacpp" else worker_localllm
        print(json.dumps(fn(args.path, args.threads, args.concurrency, args.n_prompt, args.n_gen)))
        return 0

    from localllm import hub
    venv_py = str(ensure_venv())
    machine = describe(args.threads, venv_py)
    print(machine_line(machine), flush=True)
    results = []
    for name in args.model or DEFAULT_MODELS:
        path = str(hub.resolve_model(name))
        runs: dict[str, list[list[dict]]] = {"localllm": [], "llamacpp": []}
        for rep in range(args.repetitions):       # alternate who goes first: load drifts
            order = ["localllm", "llamacpp"] if rep % 2 == 0 else ["llamacpp", "localllm"]
            for engine in order:
                runs[engine].append(run_worker(sys.executable if engine == "localllm" else venv_py,
                                               engine, path, args))
        row = {"model": name, "threads": args.threads, "n_prompt": args.n_prompt, "n_gen": args.n_gen,
               "repetitions": args.repetitions, "kv_bytes_per_token": kv_bytes_per_token(path),
               "localllm": best_of(runs["localllm"]), "llamacpp": best_of(runs["llamacpp"]), "runs": runs}
        results.append(row)
        print_row(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0


def best_of(reps: list[list[dict]]) -> list[dict]:
    """Per concurrency, the repetition with the highest throughput (the least disturbed by other
    jobs on a shared machine), with every repetition's figure kept in "all_tps"."""
    best = []
    for rows in zip(*reps):
        top = dict(max(rows, key=lambda r: r["tps"]))
        top["all_tps"] = [r["tps"] for r in rows]
        best.append(top)
    return best


def print_row(row: dict) -> None:
    print(f"\n### {row['model']} ({row['threads']} threads, prompt {row['n_prompt']}, "
          f"{row['n_gen']} decode steps, best of {row['repetitions']})")
    print("| sequences | localllm t/s | llama.cpp t/s | ratio | localllm peak KV (blocks, MiB) | "
          "llama.cpp KV cells |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for a, b in zip(row["localllm"], row["llamacpp"]):
        print(f"| {a['n']} | {a['tps']:.1f} | {b['tps']:.1f} | {a['tps'] / b['tps']:.2f}x | "
              f"{a['peak_blocks']}, {a['kv_peak_mb']:.1f} | {b['kv_cells']} "
              f"({b['kv_cells'] * row['kv_bytes_per_token'] / 2 ** 20:.1f} MiB) |")


if __name__ == "__main__":
    sys.exit(main())
