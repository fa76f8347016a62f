#!/usr/bin/env python3
"""How far a perplexity figure moves when the forward's last bits move: the noise floor under
docs/quantization.md's comparison of our perplexity with llama.cpp's on the same file.

Each GGUF is copied with every nonzero F32 normalization weight (the 1-D `*norm.weight` tensors)
moved by one unit in the last place, up or down at random per element (a seeded draw; the
quantized matrices are untouched). Such a copy is the same model to within float rounding: it is
what a different summation order does to a forward, made reproducible and given to both tools
alike. The copies and the original are scored by llama.cpp's `llama-perplexity` (c=512, the whole corpus, as
benchmarks/imatrix_quality.py does) and, with --ours, by `localllm perplexity`.

    python benchmarks/perplexity_sensitivity.py FILE.gguf [FILE.gguf ...] [--seeds 2] [--ours]
        [--seed-start 0] [--threads 2] [--out benchmarks/results/perplexity_sensitivity_DATE.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "python")]

from imatrix_quality import ppl_llamacpp, ppl_ours  # noqa: E402
from llamacpp_tools_build import ensure_llamacpp_tools  # noqa: E402
from machine import cpu_model, localllm_isa  # noqa: E402


def nudged_copy(src: Path, dst: Path, seed: int) -> int:
    """`src` copied to `dst` with each element of its F32 norm weights one ulp up or down
    (seeded); returns how many elements moved."""
    from gguf import GGUFReader, GGMLQuantizationType
    shutil.copyfile(src, dst)
    rng = np.random.default_rng(seed)
    moved = 0
    for t in GGUFReader(dst, "r+").tensors:
        if t.tensor_type != GGMLQuantizationType.F32 or not t.name.endswith("norm.weight"):
            continue
        x = t.data                                  # a writable view of the copy's bytes
        toward = np.where(rng.random(x.shape) < 0.5, np.float32(np.inf), np.float32(-np.inf))
        nudged = np.where(x == 0, x, np.nextafter(x, toward))   # a zero stays a zero, not a denormal
        moved += int(np.count_nonzero(nudged != x))
        x[...] = nudged
    return moved


def spread(figures: list[float]) -> float:
    """The largest difference between two figures, in percent of the smallest."""
    return round(100 * (max(figures) - min(figures)) / min(figures), 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--seeds", type=int, default=2, help="nudged copies per file")
    ap.add_argument("--seed-start", type=int, default=0,
                    help="first seed; above 0 the original files are not scored again (a continued run)")
    ap.add_argument("--ours", action="store_true", help="also score each file with localllm perplexity")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache/localllm/ppl-sensitivity")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    bin_dir = ensure_llamacpp_tools()
    date = datetime.date.today().isoformat()
    out = args.out or REPO / "benchmarks" / "results" / f"perplexity_sensitivity_{date}.json"
    args.work.mkdir(parents=True, exist_ok=True)
    data = {"date": date, "machine": f"{cpu_model()}, localllm {localllm_isa()}, {args.threads} threads",
            "llamacpp": "vendored in llama-cpp-python 0.3.36", "ctx": 512, "files": []}
    for src in args.files:
        row = {"file": src.name, "llamacpp": [], "localllm": []}
        variants = [(src, None)] if args.seed_start == 0 else []
        for seed in range(args.seed_start, args.seed_start + args.seeds):
            dst = args.work / f"{src.stem}-nudged{seed}.gguf"
            row["nudged_elements"] = nudged_copy(src, dst, seed)
            variants.append((dst, seed))
        for path, seed in variants:
            row["llamacpp"].append({"seed": seed, **ppl_llamacpp(bin_dir, path, args.threads)})
            if args.ours:
                row["localllm"].append({"seed": seed, **ppl_ours(path, args.threads)})
            print(json.dumps({"file": src.name, "seed": seed, "llamacpp": row["llamacpp"][-1]["ppl"],
                              "localllm": row["localllm"][-1]["ppl"] if args.ours else None}), flush=True)
        row["llamacpp_spread_pct"] = spread([r["ppl"] for r in row["llamacpp"]])
        if args.ours:
            row["localllm_spread_pct"] = spread([r["ppl"] for r in row["localllm"]])
        for path, seed in variants:
            if seed is not None:
                path.unlink()
        data["files"].append(row)
        out.write_text(json.dumps(data, indent=1) + "\n")
    for row in data["files"]:
        print(f"{row['file']}: llama.cpp {[r['ppl'] for r in row['llamacpp']]} spread {row['llamacpp_spread_pct']}%"
              + (f"; localllm {[r['ppl'] for r in row['localllm']]} spread {row['localllm_spread_pct']}%"
                 if args.ours else ""))


if __name__ == "__main__":
    main()
