#!/usr/bin/env python3
"""llama.cpp's own floor for the Vulkan agreement: its Vulkan backend against its CPU backend,
measured by its own tool, beside localllm's Vulkan backend against localllm's CPU on the same
positions.

`llama-perplexity` (built with ggml's Vulkan backend by llamacpp_vulkan_build.py) saves the CPU's
logits over the first --chunks chunks of --ctx tokens of the corpus (`--kl-divergence-base`),
then runs the same chunks on Vulkan (`-ngl 99`, the device GGML_VK_VISIBLE_DEVICES names) and
prints "Same top p", the share of scored positions whose top-1 token is the CPU's: the second
half of every chunk, as llama-perplexity scores. localllm scores the same positions of the same
chunks (its tokenizer gives llama.cpp's ids) with `device="cpu"` and `device="vulkan",
n_gpu_layers="all"`.

    LOCALLLM_VULKAN_ALLOW_CPU=1 python benchmarks/llamacpp_vulkan_agreement.py [--model smollm2-135m-q4_1]
        [--ctx 128] [--chunks 3] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from llamacpp_vulkan_build import BUILD, ensure_llamacpp_vulkan
from machine import describe, line
from vulkan_agreement import CORPUS


def llamacpp_same_top(binary: Path, model: str, ctx: int, chunks: int, threads: int, vk_index: int) -> dict:
    """llama-perplexity's KL-divergence statistics of its Vulkan run against its CPU run."""
    common = [str(binary), "-m", model, "-f", str(CORPUS), "-c", str(ctx), "-b", str(ctx), "--chunks", str(chunks),
              "-t", str(threads)]
    cpu_env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}   # no CPU-type device
    with tempfile.TemporaryDirectory() as tmp:
        base = str(Path(tmp) / "cpu.kld")
        subprocess.run([*common, "-ngl", "0", "--kl-divergence-base", base], env=cpu_env, check=True,
                       capture_output=True)
        run = subprocess.run([*common, "-ngl", "99", "--kl-divergence-base", base, "--kl-divergence"], check=True,
                             capture_output=True, text=True, env=dict(os.environ, GGML_VK_VISIBLE_DEVICES=str(vk_index)))
    text = run.stdout + run.stderr
    same = re.search(r"Same top p:\s+([\d.]+)\s*±\s*([\d.]+)", text)
    kld = re.search(r"Mean\s+KLD:\s+([-\d.e]+)", text)
    listed = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True,
                            env=dict(os.environ, GGML_VK_VISIBLE_DEVICES=str(vk_index)))
    device = re.search(r"Vulkan0: (.+?) \(\d+ MiB", listed.stdout + listed.stderr)
    if not same:
        raise RuntimeError("llama-perplexity printed no 'Same top p':\n" + text[-3000:])
    return {"same_top1_pct": float(same.group(1)), "same_top1_pct_err": float(same.group(2)),
            "mean_kld": float(kld.group(1)) if kld else None, "device": device.group(1).strip() if device else None}


def localllm_same_top(path: str, ctx: int, chunks: int, threads: int) -> dict:
    """localllm's Vulkan top-1 against its CPU at the positions llama-perplexity scores."""
    from localllm import LLM
    cpu = LLM(path, n_ctx=ctx + 16, device="cpu", n_threads=threads)
    vk = LLM(path, n_ctx=ctx + 16, device="vulkan", n_gpu_layers="all", n_threads=threads)
    ids = cpu.tokenize(CORPUS.read_text(encoding="utf-8"), add_special=True)
    same = total = 0
    for c in range(chunks):   # chunks as localllm.perplexity (and llama-perplexity) cut them
        chunk = list(ids[c * ctx:(c + 1) * ctx])
        if cpu.tokenizer.add_bos:
            chunk[0] = cpu.tokenizer.bos_id
        rows = range(ctx // 2, ctx - 1)
        a, b = cpu.logits(chunk, rows=rows).argmax(-1), vk.logits(chunk, rows=rows).argmax(-1)
        same, total = same + int((a == b).sum()), total + len(a)
    return {"same_top1_pct": round(100.0 * same / total, 3), "positions": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-q4_1")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vk-index", type=int, default=0, help="the Vulkan device llama.cpp runs (its index)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from localllm import hub
    machine = describe(args.threads)
    print(line(machine))
    path = str(hub.pull(args.model, quiet=True))
    binary = ensure_llamacpp_vulkan(["llama-bench", "llama-perplexity"]) / "llama-perplexity"
    row = {"model": args.model, "ctx": args.ctx, "chunks": args.chunks,
           "llamacpp_vulkan_vs_llamacpp_cpu": llamacpp_same_top(binary, path, args.ctx, args.chunks, args.threads,
                                                                args.vk_index),
           "localllm_vulkan_vs_localllm_cpu": localllm_same_top(path, args.ctx, args.chunks, args.threads)}
    print(json.dumps(row, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "machine": machine,
                                        "build": str(BUILD), **row}, indent=1) + "\n")


if __name__ == "__main__":
    main()
