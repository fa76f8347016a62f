#!/usr/bin/env python3
"""Serving benchmark: drives any OpenAI-compatible /v1/completions endpoint with synthetic
prompts, at fixed concurrency levels or at a Poisson request rate, and reports TTFT, ITL, TPOT
and end-to-end latency (mean, p50, p90, p99), output tokens/s and requests/s; writes JSON and a
PNG (output throughput against latency, matplotlib).

    python benchmarks/serve.py --url http://127.0.0.1:8080 -c 1 4 16 64 [--json out.json --png out.png]
    python benchmarks/serve.py --url ... --rate 2.5 -n 100

Every request streams (one SSE chunk per token or group of tokens), asks for exactly
--output-len tokens (ignore_eos, as vLLM's benchmark does) and reads the exact token counts
from the final usage chunk (stream_options.include_usage). TTFT: request sent to first text;
ITL: gaps between chunks carrying text; TPOT: (end - first text) / (output tokens - 1).
Sampling fields are left to the server's defaults (llama.cpp's for both localllm and
llama-server), with a fixed seed per request.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

import aiohttp

WORDS = ("time year people way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night point "
         "home water room mother area money story fact month lot right study book eye job word business issue "
         "side kind head house service friend father power hour game line end member law car city community name "
         "president team minute idea kid body information back parent face others level office door health person "
         "art war history party result change morning reason research girl guy moment air teacher force education").split()


def synthetic_prompts(n: int, words: int, seed: int = 0) -> list[str]:
    """n prompts of `words` random common words each (about 1.3 tokens a word); distinct from
    their first words on, so no prompt shares a cached prefix with another."""
    rng = random.Random(seed)
    return [f"{i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) for i in range(n)]


@dataclass
class RequestResult:
    ok: bool
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str = ""

    @property
    def tpot(self) -> Optional[float]:
        return (self.e2e - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else None


async def one_request(http: aiohttp.ClientSession, url: str, model: Optional[str], prompt: str, output_len: int,
                      seed: int) -> RequestResult:
    body = {"prompt": prompt, "max_tokens": output_len, "ignore_eos": True, "seed": seed, "stream": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    res = RequestResult(ok=False)
    t0 = time.perf_counter()
    last = None
    try:
        async with http.post(f"{url}/v1/completions", json=body) as r:
            if r.status != 200:
                res.error = f"HTTP {r.status}: {(await r.read())[:200]!r}"
                return res
            async for raw in r.content:      # one line at a time (SSE events end with a blank line)
                if not raw.startswith(b"data: ") or raw.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(raw[6:])
                now = time.perf_counter()
                if chunk.get("usage"):
                    res.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    res.output_tokens = chunk["usage"]["completion_tokens"]
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    if last is None:
                        res.ttft = now - t0
                    else:
                        res.itl.append(now - last)
                    last = now
        res.e2e = time.perf_counter() - t0
        res.ok = last is not None and res.output_tokens > 0
        if not res.ok:
            res.error = "no text or no usage chunk in the stream"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:   # ValueError: bad JSON, overlong line
        res.error = f"{type(e).__name__}: {e}"
    return res


async def run_level(url: str, model: Optional[str], prompts: list[str], output_len: int,
                    concurrency: Optional[int], rate: Optional[float], seed: int = 0) -> tuple[list[RequestResult], float]:
    """All prompts, `concurrency` at a time, or arriving as a Poisson process of `rate` per
    second; returns the results and the wall time."""
    # aiohttp, not httpx: on a 2-core machine the load generator takes CPU from the server it
    # measures, and httpx's line-by-line streaming cost 40% more client CPU per token (measured 2026-12-06).
    # A fresh connection per request (no keep-alive), for every server alike: reusing one raced
    # llama-server closing it (1-2 of 32 requests failed with "server disconnected without
    # sending a response" even with idle connections dropped after 2 s). A local connect costs
    # well under a millisecond of the TTFT.
    connector = aiohttp.TCPConnector(limit=max(concurrency or 0, 256), force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600.0)) as http:
        t0 = time.perf_counter()
        if rate is None:
            queue = list(enumerate(prompts))[::-1]

            async def worker() -> list[RequestResult]:
                out = []
                while queue:
                    i, p = queue.pop()
                    out.append(await one_request(http, url, model, p, output_len, seed + i))
                return out
            parts = await asyncio.gather(*(worker() for _ in range(concurrency)))
            results = [r for part in parts for r in part]
        else:
            rng = random.Random(seed)
            tasks = []
            for i, p in enumerate(prompts):
                tasks.append(asyncio.create_task(one_request(http, url, model, p, output_len, seed + i)))
                await asyncio.sleep(rng.expovariate(rate))
            results = list(await asyncio.gather(*tasks))
        return results, time.perf_counter() - t0


def _stats(values: list[float]) -> dict:
    if not values:
        return {}
    v = sorted(values)

    def pct(p: float) -> float:
        return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] * 1000

    return {"mean_ms": statistics.fmean(v) * 1000, "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99)}


def summarize(results: list[RequestResult], wall: float) -> dict:
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    return {"requests": len(results), "failed": len(results) - len(ok), "wall_s": wall,
            "output_tokens": out_tokens, "prompt_tokens": sum(r.prompt_tokens for r in ok),
            "output_tok_s": out_tokens / wall, "req_s": len(ok) / wall,
            "ttft": _stats([r.ttft for r in ok]), "itl": _stats([x for r in ok for x in r.itl]),
            "tpot": _stats([r.tpot for r in ok if r.tpot is not None]), "e2e": _stats([r.e2e for r in ok]),
            "errors": sorted({r.error for r in results if not r.ok})[:5]}


def machine() -> dict:
    """CPU model, the widest x86 vector ISA it reports, and CPUs available."""
    model = platform.processor()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    isa = next((name for flag, name in (("avx512_vnni", "AVX-512 VNNI"), ("avx512f", "AVX-512"),
                                        ("avx2", "AVX2")) if flag in flags), "baseline")
    return {"cpu": model, "isa": isa, "cpus": len(os.sched_getaffinity(0))}


def plot(runs: list[dict], path: str) -> None:
    """One row per model: output tokens/s against p50 TPOT and p50 TTFT, one line per server,
    points labelled with their concurrency (or rate)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({r["model"] for r in runs})
    fig, axes = plt.subplots(len(models), 2, figsize=(12, 4 * len(models)), squeeze=False)
    for row, model in zip(axes, models):
        for server in sorted({r["server"] for r in runs if r["model"] == model}):
            rs = [r for r in runs if r["model"] == model and r["server"] == server]
            for ax, metric in zip(row, ("tpot", "ttft")):
                xs = [r["output_tok_s"] for r in rs]
                ys = [r[metric].get("p50_ms", float("nan")) for r in rs]
                ax.plot(xs, ys, marker="o", label=server)
                for r, x, y in zip(rs, xs, ys):
                    ax.annotate(str(r.get("concurrency") or f"{r.get('rate')}/s"), (x, y), fontsize=7,
                                textcoords="offset points", xytext=(3, 3))
        for ax, metric in zip(row, ("TPOT", "TTFT")):
            ax.set_title(f"{model}: p50 {metric}", fontsize=9)
            ax.set_xlabel("output tokens/s")
            ax.set_ylabel(f"p50 {metric} (ms)")
            ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
        row[0].legend(fontsize=8)
    fig.suptitle("Serving: throughput against latency (points: concurrent clients)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def bench(url: str, model: Optional[str], levels: list[int], rate: Optional[float], n_prompts: Optional[int],
          input_words: int, output_len: int, label: dict) -> list[dict]:
    """One warm-up request, then each level (or the rate) with fresh prompts; one row each."""
    asyncio.run(run_level(url, model, synthetic_prompts(1, input_words, seed=999), output_len, 1, None))
    rows = []
    for i, level in enumerate([None] if rate is not None else levels):
        n = n_prompts or (max(8, 2 * level) if level else 32)
        prompts = synthetic_prompts(n, input_words, seed=i + 1)
        results, wall = asyncio.run(run_level(url, model, prompts, output_len, level, rate))
        row = dict(label, concurrency=level, rate=rate, **summarize(results, wall))
        print(f"  {label.get('server', url)} {label.get('model', '')} c={level or '-'} rate={rate or '-'}: "
              f"{row['output_tok_s']:.1f} tok/s, {row['req_s']:.2f} req/s, p50 TTFT {row['ttft'].get('p50_ms', 0):.0f} ms, "
              f"p50 ITL {row['itl'].get('p50_ms', 0):.1f} ms, failed {row['failed']}", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="server base URL (without /v1)")
    ap.add_argument("--model", default=None, help="model field to send (default: none)")
    ap.add_argument("-c", "--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--rate", type=float, default=None, help="Poisson arrivals per second instead of -c")
    ap.add_argument("-n", "--num-prompts", type=int, default=None, help="requests per level (default max(8, 2c))")
    ap.add_argument("--input-words", type=int, default=96, help="words per synthetic prompt (~1.3 tokens each)")
    ap.add_argument("--output-len", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--label", default="server", help="name of the server in the report")
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()
    rows = bench(args.url, args.model, args.concurrency, args.rate, args.num_prompts, args.input_words,
                 args.output_len, {"server": args.label, "model": args.model or ""})
    report = {"machine": machine(), "runs": rows, "input_words": args.input_words, "output_len": args.output_len}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.png:
        plot(rows, args.png)


if __name__ == "__main__":
    main()
