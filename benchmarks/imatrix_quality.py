#!/usr/bin/env python3
"""What an imatrix buys: perplexity of SmolLM2-135M quantized with and without an importance
matrix, by localllm and by llama.cpp's own tools (benchmarks/llamacpp_tools_build.py), for
docs/quantization.md.

* The model: the cached SmolLM2-135M Q4_1 file dequantized to F32 (the only weights cached here;
  its values are Q4_1's, so each preset below re-quantizes Q4_1-valued weights).
* Calibration: the docstrings of a fixed list of Python standard-library modules and their public
  members (English prose about software, nothing of the evaluation text); the imatrix is ours
  (`localllm imatrix`, 512-token chunks, run on the Q4_1 file) — llama-quantize reads it, and both quantizers write the
  same bytes with it (tests/test_imatrix.py), so each quantized file serves both perplexity tools.
* Evaluation: perplexity at c=512 over /work/shared/corpus/gpl-3.txt, `localllm perplexity` and
  `llama-perplexity` on the same files.

    python benchmarks/imatrix_quality.py [--presets q2_k,q3_k_s,iq4_xs] [--threads 2]
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from llamacpp_tools_build import ensure_llamacpp_tools
from machine import cpu_model, localllm_isa

CORPUS = Path("/work/shared/corpus/gpl-3.txt")
CALIBRATION_MODULES = ["argparse", "asyncio", "collections", "concurrent.futures", "csv", "dataclasses", "datetime",
                       "email.message", "functools", "http.client", "inspect", "itertools", "json", "logging",
                       "pathlib", "pickle", "random", "re", "shutil", "sqlite3", "string", "subprocess",
                       "tarfile", "textwrap", "threading", "typing", "unittest", "urllib.request", "zipfile"]


def calibration_text() -> str:
    """The calibration text: each module's docstring, then its public members' (sorted by name)."""
    parts = []
    for name in CALIBRATION_MODULES:
        mod = importlib.import_module(name)
        parts.append(inspect.getdoc(mod) or "")
        for member_name, member in sorted(vars(mod).items()):
            if member_name.startswith("_") or getattr(member, "__module__", None) != mod.__name__:
                continue
            doc = inspect.getdoc(member)
            if doc:
                parts.append(f"{member_name}: {doc}")
    return "\n\n".join(p for p in parts if p)


def localllm(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "localllm_cli", *args], capture_output=True, text=True, check=True)
    return r.stdout + r.stderr


def ppl_ours(model: Path, threads: int) -> float:
    out = localllm("perplexity", "-m", str(model), "-f", str(CORPUS), "-c", "512", "-t", str(threads))
    return float(re.search(r"PPL = ([0-9.]+)", out).group(1))


def ppl_llamacpp(bin_dir: Path, model: Path, threads: int) -> float:
    r = subprocess.run([str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(CORPUS), "-c", "512",
                        "-t", str(threads)], capture_output=True, text=True, check=True)
    return float(re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout + r.stderr).group(1))


def bits_per_weight(path: Path) -> float:
    """Bits per element of the weight tensors (2-D and up), as llama.cpp's model summary counts them."""
    from localllm.gguf import GGUFFile
    g = GGUFFile(str(path))
    tensors = [t for t in g.tensors if len(t.shape) >= 2]
    return 8 * sum(t.nbytes for t in tensors) / sum(t.n_elements for t in tensors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="q2_k,q3_k_s,iq4_xs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=40, help="imatrix chunks of 512 tokens at most")
    ap.add_argument("--no-llamacpp", action="store_true", help="localllm's perplexity only (no llama.cpp build)")
    args = ap.parse_args()
    from localllm import hub
    bin_dir = None if args.no_llamacpp else ensure_llamacpp_tools()
    print(f"machine: {cpu_model()}, localllm {localllm_isa()}, {args.threads} threads; "
          f"python {sys.version.split()[0]} (calibration docstrings)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="imatrix-quality-"))
    f32, calib, im = work / "smollm2-f32.gguf", work / "calibration.txt", work / "imatrix.gguf"
    q4_1 = hub.pull("smollm2-135m-q4_1", quiet=True)
    localllm("quantize", str(q4_1), str(f32), "f32", "--allow-requantize", "-q")
    calib.write_text(calibration_text())
    # Collected on the Q4_1 file: the same weights as the F32 one, several times faster to run.
    print(localllm("imatrix", "-m", str(q4_1), "-f", str(calib), "-o", str(im), "-c", "512", "--chunks",
                   str(args.chunks), "-t", str(args.threads), "-q").strip(), flush=True)
    rows = []
    for preset in args.presets.split(","):
        for weighted in (False, True):
            out = work / f"{preset}{'-imatrix' if weighted else ''}.gguf"
            localllm("quantize", str(f32), str(out), preset, "-q", *(["--imatrix", str(im)] if weighted else []))
            row = {"preset": preset, "imatrix": weighted, "bytes": out.stat().st_size,
                   "bpw": round(bits_per_weight(out), 3), "ppl_localllm": ppl_ours(out, args.threads),
                   "ppl_llamacpp": ppl_llamacpp(bin_dir, out, args.threads) if bin_dir else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| preset | imatrix | size (MB) | bits/weight | PPL localllm | PPL llama-perplexity |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        theirs = "-" if r["ppl_llamacpp"] is None else f"{r['ppl_llamacpp']:.4f}"
        print(f"| {r['preset']} | {'yes' if r['imatrix'] else 'no'} | {r['bytes'] / 1e6:.1f} | {r['bpw']:.3f} | "
              f"{r['ppl_localllm']:.4f} | {theirs} |")


if __name__ == "__main__":
    main()
