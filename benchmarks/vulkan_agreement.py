#!/usr/bin/env python3
"""Teacher-forced top-1 agreement of the Vulkan backend with the CPU over a longer text than the
tests use: the first N tokens of the corpus, every position scored, on each model. Beside it, the
same figure between the CPU's own two numerics (fast, the default, and llama.cpp's float order):
two correct implementations, whose disagreement is the floor any third one meets at near ties.

Also the agreement at the positions that are not near ties: where the CPU's top-1 leads its
top-2 by more than --margin logits. A flip there is not rounding, it is a wrong result.

    LOCALLLM_VULKAN_ALLOW_CPU=1 python benchmarks/vulkan_agreement.py [--tokens 200]
        [--models smollm2-135m-q4_1,gemma3-270m-q4_k_m] [--ngl all] [--out FILE.json]

--reference scores the reference prompts instead (tests/data/reference: each prompt and the 48
tokens llama.cpp generated after it, teacher-forced), and adds each side's agreement with
llama.cpp's own top-1 there.

LOCALLLM_VULKAN_INT8=1 in the environment takes the integer-dot kernels (recorded in each row).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import numpy as np

from machine import describe, line

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
CORPUS = DATA / "corpus" / "gpl-3.txt"
MODELS = "smollm2-135m-q4_1,gemma3-270m-q4_k_m,qwen2.5-coder-0.5b-q4_k_m"


def compare(ref: np.ndarray, other: np.ndarray, margin: float) -> dict:
    """Top-1 agreement of `other` with `ref` over every row, and over the rows where ref's
    top-1/top-2 margin exceeds `margin`; the largest such margin among the flips."""
    top_r, top_o = ref.argmax(-1), other.argmax(-1)
    two = np.sort(ref, axis=-1)[:, -2:]
    margins = two[:, 1] - two[:, 0]
    clear = margins > margin
    flips = top_r != top_o
    return {"agreement": float((~flips).mean()), "positions": int(len(flips)),
            "clear_positions": int(clear.sum()), "clear_agreement": float((~flips[clear]).mean()),
            "largest_flip_margin": float(margins[flips].max()) if flips.any() else 0.0,
            "max_abs_logit_diff": float(np.abs(ref - other).max())}


def sequences(key: str, tokenize, n_tokens: int, reference: bool) -> list[tuple[list[int], np.ndarray]]:
    """(token ids, llama.cpp's top-1 at each position or an empty array) to score: the first
    n_tokens of the corpus, or each reference prompt followed by llama.cpp's greedy tokens."""
    if not reference:
        return [(tokenize(CORPUS.read_text(encoding="utf-8"))[:n_tokens], np.zeros(0, np.int64))]
    top = np.load(DATA / "reference" / f"logits_{key}.npz")
    rows = [json.loads(line) for line in (DATA / "reference" / "greedy.jsonl").read_text().splitlines()]
    return [(r["prompt_ids"] + r["greedy_ids"][:-1], top[r["prompt"]["name"] + "__top_ids"][:, 0])
            for r in rows if r["model"] == key]


def run_model(key: str, n_tokens: int, ngl: str, threads: int, margin: float, reference: bool) -> dict:
    from localllm import LLM, _core, hub
    path = str(hub.pull(key, quiet=True))
    n_ctx = 256 if reference else n_tokens + 16
    llms = {"cpu": LLM(path, n_ctx=n_ctx, device="cpu", n_threads=threads),
            "llama": LLM(path, n_ctx=n_ctx, device="cpu", n_threads=threads, numerics="llama.cpp")}
    seqs = sequences(key, llms["cpu"].tokenize, n_tokens, reference)
    logits = {name: np.concatenate([llm.logits(ids) for ids, _ in seqs]) for name, llm in llms.items()}
    t0 = time.time()
    vk = LLM(path, n_ctx=n_ctx, device="vulkan", n_gpu_layers=ngl, n_threads=threads)
    logits["vk"] = np.concatenate([vk.logits(ids) for ids, _ in seqs])
    seconds = time.time() - t0
    device = _core.vulkan_device_name(_core.resolve_device("Vulkan")[1])
    row = {"model": key, "tokens": len(logits["cpu"]), "ngl": ngl, "vulkan_device": device,
           "vulkan_int8": os.environ.get("LOCALLLM_VULKAN_INT8") == "1", "vulkan_seconds": round(seconds, 1),
           "vulkan_vs_cpu": compare(logits["cpu"], logits["vk"], margin),
           "cpu_llamacpp_numerics_vs_cpu": compare(logits["cpu"], logits["llama"], margin)}
    if reference:   # each side's top-1 against llama.cpp's own, at the positions it was stored for
        at, start = [], 0
        for ids, top in seqs:
            at.extend(range(start + len(ids) - len(top), start + len(ids)))
            start += len(ids)
        ref = np.concatenate([top for _, top in seqs])
        row["vs_llamacpp_reference"] = {name: float((logits[name][at].argmax(-1) == ref).mean())
                                        for name in ("cpu", "llama", "vk")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--ngl", default="all")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--margin", type=float, default=0.25, help="logits: a lead above it is not a near tie")
    ap.add_argument("--reference", action="store_true", help="the reference prompts instead of the corpus")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    machine = describe(args.threads)
    print(line(machine))
    rows = []
    for key in args.models.split(","):
        row = run_model(key, args.tokens, args.ngl, args.threads, args.margin, args.reference)
        rows.append(row)
        for name in ("vulkan_vs_cpu", "cpu_llamacpp_numerics_vs_cpu"):
            r = row[name]
            print(f"{key:28s} {name:30s} top-1 {r['agreement']:.3f} over {r['positions']}, "
                  f"{r['clear_agreement']:.3f} over the {r['clear_positions']} with a lead > {args.margin}, "
                  f"largest flipped lead {r['largest_flip_margin']:.3f}, max |dlogit| {r['max_abs_logit_diff']:.2f}")
        if "vs_llamacpp_reference" in row:
            print(f"{key:28s} top-1 against llama.cpp's: " +
                  ", ".join(f"{k} {v:.3f}" for k, v in row["vs_llamacpp_reference"].items()))
    if args.out:
        args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "machine": machine,
                                        "margin": args.margin, "reference": args.reference, "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
