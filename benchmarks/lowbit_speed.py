#!/usr/bin/env python3
"""Speed of files in the low-bit types: `localllm bench` against llama.cpp's `llama-bench` on the
same files, in the same run, for docs/performance.md.

Each round runs one `localllm bench -r 1` process and one `llama-bench -r 1` process per file,
alternating which goes first, so machine noise hits both alike; the figure kept per engine is the
best round (a shared machine only ever slows a run down). Both measure pp (one batch of N prompt
tokens) and tg (N single-token forwards) llama-bench's way, with the same threads.

    python benchmarks/lowbit_speed.py FILE.gguf [FILE.gguf ...] [-t 2] [-p 512] [-n 128] [-r 3]
        [--json OUT.json]

The files of docs/performance.md's table are benchmarks/imatrix_quality.py's (kept in its --work
folder): Qwen2.5-Coder-0.5B re-quantized to Q2_K, Q3_K_S, IQ3_XXS and IQ2_XS with an imatrix.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from llamacpp_tools_build import ensure_llama_bench
from machine import cpu_model, localllm_isa


def ours(path: Path, threads: int, n_prompt: int, n_gen: int) -> dict[str, float]:
    r = subprocess.run([sys.executable, "-m", "localllm_cli", "bench", "-m", str(path), "-p", str(n_prompt),
                        "-n", str(n_gen), "-t", str(threads), "-r", "1", "--json"],
                       capture_output=True, text=True, check=True)
    return {row["test"]: row["avg_ts"] for row in json.loads(r.stdout)}


def theirs(bin_dir: Path, path: Path, threads: int, n_prompt: int, n_gen: int) -> dict[str, float]:
    r = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(path), "-p", str(n_prompt), "-n", str(n_gen),
                        "-t", str(threads), "-r", "1", "-o", "json"], capture_output=True, text=True, check=True)
    out = {}
    for row in json.loads(r.stdout):
        out[f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"] = row["avg_ts"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bin_dir = ensure_llama_bench()
    machine = f"{cpu_model()}, localllm {localllm_isa()}, {args.threads} threads (shared machine)"
    print(f"machine: {machine}", flush=True)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    for rnd in range(args.rounds):
        for f in map(Path, args.files):
            rec = runs.setdefault(f.name, {"localllm": [], "llama.cpp": []})
            order = ["localllm", "llama.cpp"] if rnd % 2 == 0 else ["llama.cpp", "localllm"]
            for engine in order:
                res = (ours(f, args.threads, args.n_prompt, args.n_gen) if engine == "localllm"
                       else theirs(bin_dir, f, args.threads, args.n_prompt, args.n_gen))
                rec[engine].append(res)
                print(f"round {rnd + 1} {f.name} {engine}: {res}", flush=True)
    pp, tg = f"pp{args.n_prompt}", f"tg{args.n_gen}"
    rows = []
    for name, rec in runs.items():
        best = {e: {t: max(r[t] for r in rs) for t in (pp, tg)} for e, rs in rec.items()}
        rows.append({"file": name, "best": best, "rounds": rec})
    print(f"\n| file | {pp} localllm | {pp} llama.cpp | ratio | {tg} localllm | {tg} llama.cpp | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        a, b = r["best"]["localllm"], r["best"]["llama.cpp"]
        print(f"| {r['file']} | {a[pp]:.1f} | {b[pp]:.1f} | {a[pp] / b[pp]:.2f}x | {a[tg]:.1f} | {b[tg]:.1f} | "
              f"{a[tg] / b[tg]:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": datetime.date.today().isoformat(), "machine": machine,
                                               "n_prompt": args.n_prompt, "n_gen": args.n_gen,
                                               "rounds": args.rounds, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
