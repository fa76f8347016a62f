#!/usr/bin/env python3
"""Conversion throughput: HF checkpoint -> Q4_K_M in one pass vs llama.cpp's two steps.

In one run, each in a fresh process (peak RSS per process):
  * localllm: `convert(HF_DIR, q4_k_m)` straight from the safetensors checkpoint;
  * localllm: `quantize_gguf(F16.gguf, q4_k_m)` (the second step alone);
  * llama.cpp: llama_model_quantize(F16.gguf -> Q4_K_M) (llama-cpp-python, same threads).
Throughput is MB/s of F16-equivalent input (2 bytes per parameter), so all three are on one
scale; the F16 file is written by localllm's converter beforehand.

    python benchmarks/convert_bench.py [--models smollm2 qwen2 gemma3] [-t 2] [-r 2] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import convert_common as common  # noqa: E402  (sets sys.path)
from localllm.gguf import GGUFFile  # noqa: E402
from localllm_convert import convert  # noqa: E402
from machine import describe, line as machine_line  # noqa: E402

_OURS = r"""
import json, sys, time
sys.path[:0] = sys.argv[5].split(":")
from localllm_convert import convert, quantize_gguf
mode, src, dst, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0 = time.perf_counter()
if mode == "convert":
    convert(src, dst, type="q4_k_m", threads=threads, progress=False)
else:
    quantize_gguf(src, dst, "q4_k_m", threads=threads, progress=False)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"seconds": time.perf_counter() - t0, "max_rss_mb": int(hwm) / 1024}))
"""


def run_ours(mode: str, src: Path, dst: Path, threads: int) -> dict:
    paths = ":".join(str(common.REPO / p) for p in ("python", "cli", "convert"))
    proc = subprocess.run([sys.executable, "-c", _OURS, mode, str(src), str(dst), str(threads),
                           paths], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2", "qwen2", "gemma3"])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    machine = describe(args.threads)
    print(machine_line(machine), flush=True)
    results = {"machine": machine}
    with tempfile.TemporaryDirectory(prefix="convert-bench-") as tmp:
        tmp = Path(tmp)
        for model in args.models:
            ckpt = common.checkpoint(model)
            f16 = tmp / f"{model}-f16.gguf"
            convert(ckpt, f16, type="f16", threads=args.threads, progress=False)
            f16_mb = sum(t.n_elements for t in GGUFFile(str(f16)).tensors) * 2 / 1e6
            runs: dict[str, list[dict]] = {"convert": [], "quantize": [], "llama.cpp": []}
            for _ in range(args.repeats):     # interleaved, so machine noise hits all alike
                out = tmp / "out.gguf"
                runs["convert"].append(run_ours("convert", ckpt, out, args.threads))
                runs["quantize"].append(run_ours("quantize", f16, out, args.threads))
                runs["llama.cpp"].append(common.llamacpp_quantize(f16, out, "q4_k_m", args.threads))
            summary = {}
            for name, rs in runs.items():
                sec = statistics.median(r["seconds"] for r in rs)
                summary[name] = {"seconds": sec, "mb_per_s": f16_mb / sec,
                                 "max_rss_mb": max(r["max_rss_mb"] for r in rs)}
            results[model] = {"f16_mb": f16_mb, **summary}
            print(f"{model:8} F16 {f16_mb:7.1f} MB | " + " | ".join(
                f"{n}: {s['seconds']:6.2f} s {s['mb_per_s']:6.1f} MB/s RSS {s['max_rss_mb']:6.0f} MB"
                for n, s in summary.items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
