#!/usr/bin/env python3
"""How close our importance matrix is to llama-imatrix's, against how far llama-imatrix's own moves
when its model's norm weights move by one ulp (perplexity_sensitivity.py's nudged copy): the table
in docs/quantization.md ("Collector").

SmolLM2-135M Q4_1 over the first 16,000 characters of the corpus, 3 chunks of 128 tokens (what
tests/test_imatrix.py collects). Per pair of files, for the inputs of attn_q, attn_output, ffn_gate
and ffn_down: the largest per-tensor difference over the layers (L2 norm of the difference of the
sums over the reference's), and the largest over the first two layers.

    python benchmarks/imatrix_sensitivity.py [--threads 2]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "python")]

from imatrix_quality import CORPUS  # noqa: E402   (the text tests/test_imatrix.py cuts)
from llamacpp_tools_build import ensure_llamacpp_tools  # noqa: E402
from perplexity_sensitivity import nudged_copy  # noqa: E402

KINDS = ("attn_q", "attn_output", "ffn_gate", "ffn_down")
CHUNK, CHUNKS = 128, 3


def ours(model: Path, text: Path, out: Path, numerics: str, threads: int) -> Path:
    subprocess.run([sys.executable, "-m", "localllm_cli", "imatrix", "-m", str(model), "-f", str(text), "-o", str(out),
                    "-c", str(CHUNK), "--chunks", str(CHUNKS), "--numerics", numerics, "-t", str(threads), "-q"],
                   check=True)
    return out


def theirs(bin_dir: Path, model: Path, text: Path, out: Path, flash: bool, threads: int) -> Path:
    subprocess.run([str(bin_dir / "llama-imatrix"), "-m", str(model), "-f", str(text), "-o", str(out),
                    "-c", str(CHUNK), "-b", str(CHUNK), "--chunks", str(CHUNKS), "--no-ppl", "-t", str(threads),
                    *([] if flash else ["-fa", "off"])], check=True, capture_output=True)
    return out


def differences(a_path: Path, b_path: Path) -> dict[str, tuple[float, float]]:
    """Per kind: (largest relative L2 difference over all layers, over layers 0-1)."""
    from localllm.imatrix import load_imatrix
    a, b = load_imatrix(a_path), load_imatrix(b_path)
    n_layer = len({name.split(".")[1] for name in b.sums})
    out = {}
    for kind in KINDS:
        rel = []
        for i in range(n_layer):
            x = a.sums[f"blk.{i}.{kind}.weight"].astype(np.float64)
            y = b.sums[f"blk.{i}.{kind}.weight"].astype(np.float64)
            rel.append(float(np.linalg.norm(x - y) / np.linalg.norm(y)))
        out[kind] = (max(rel), max(rel[:2]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from localllm import hub
    bin_dir = ensure_llamacpp_tools()
    model = hub.pull("smollm2-135m-q4_1", quiet=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        text = work / "calib.txt"
        text.write_text(CORPUS.read_text()[:16000])
        nudged = work / "nudged.gguf"
        nudged_copy(model, nudged, 0)
        f = {"ours": ours(model, text, work / "ours.gguf", "llama.cpp", args.threads),
             "ours_fast": ours(model, text, work / "ours_fast.gguf", "fast", args.threads),
             "theirs": theirs(bin_dir, model, text, work / "theirs.gguf", False, args.threads),
             "theirs_flash": theirs(bin_dir, model, text, work / "theirs_flash.gguf", True, args.threads),
             "theirs_nudged": theirs(bin_dir, nudged, text, work / "theirs_nudged.gguf", False, args.threads)}
        pairs = {"ours (llama.cpp numerics) against llama-imatrix -fa off": ("ours", "theirs"),
                 "ours against llama-imatrix's default (flash attention)": ("ours", "theirs_flash"),
                 "llama-imatrix -fa off against itself, norm weights one ulp off": ("theirs_nudged", "theirs"),
                 "our fast numerics against our llama.cpp numerics": ("ours_fast", "ours")}
        print("| pair of files | " + " | ".join(KINDS) + " |")
        print("| --- |" + " ---: |" * len(KINDS))
        for label, (a, b) in pairs.items():
            d = differences(f[a], f[b])
            print(f"| {label} | " + " | ".join(f"{d[k][0]:.2%} (layers 0-1: {d[k][1]:.1e})" for k in KINDS) + " |")


if __name__ == "__main__":
    main()
