"""The portable build's speed against the native one (docs/performance.md, docs/install.md).

`localllm bench` (pp512, tg128) on the three real models, once with the native build in
python/localllm (-march=native) and once with a portable build tree's variants (LOCALLLM_PORTABLE,
cmake -B build/portable), alternating native / portable each round so that a shared machine's
load falls on both alike; each test's figure is the best of its rounds.

    python benchmarks/portable_vs_native.py [--portable-build build/portable] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "benchmarks"))
MODELS = ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"]


def portable_package(build: Path, into: Path) -> Path:
    """python/localllm with the build tree's variants in place of the native modules."""
    shutil.copytree(REPO / "python" / "localllm", into / "localllm",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "_variants"))
    shutil.copytree(build / "_variants", into / "localllm" / "_variants")
    return into


def bench(pythonpath: str, model: str, threads: int) -> tuple[dict, str]:
    code = ("import sys, localllm, localllm._core_variant as v; from localllm import _core; "
            "from localllm_cli.main import main; print(v.loaded or 'native', _core.build_target(), file=sys.stderr); "
            "sys.argv = ['localllm'] + sys.argv[1:]; main()")
    proc = subprocess.run([sys.executable, "-c", code, "bench", "-m", model, "-p", "512", "-n", "128", "-r", "1",
                           "-t", str(threads), "--json"], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": pythonpath})
    rows = json.loads(proc.stdout)
    return {r["test"]: r["avg_ts"] for r in rows}, proc.stderr.strip().splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portable-build", type=Path, default=REPO / "build" / "portable")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    args = ap.parse_args()
    from machine import cpu_model

    cli = f"{REPO / 'cli'}{os.pathsep}{REPO / 'convert'}"
    with tempfile.TemporaryDirectory() as tmp:
        package = portable_package(args.portable_build, Path(tmp))
        builds = {"native": f"{REPO / 'python'}{os.pathsep}{cli}", "portable": f"{package}{os.pathsep}{cli}"}
        best: dict = {}
        loaded = {}
        for _ in range(args.rounds):
            for model in args.models:
                for name, path in builds.items():
                    figures, loaded[name] = bench(path, model, args.threads)
                    for test, ts in figures.items():
                        best[(model, test, name)] = max(best.get((model, test, name), 0.0), ts)
    print(f"machine: {cpu_model()}, {args.threads} threads; native = {loaded['native']}, "
          f"portable = {loaded['portable']} (variant, -march target); best of {args.rounds} rounds")
    print("| model | test | native t/s | portable t/s | portable / native |")
    print("| --- | --- | ---: | ---: | ---: |")
    for model in args.models:
        for test in ("pp512", "tg128"):
            n, p = best[(model, test, "native")], best[(model, test, "portable")]
            print(f"| {model} | {test} | {n:.1f} | {p:.1f} | {p / n:.3f} |")


if __name__ == "__main__":
    main()
