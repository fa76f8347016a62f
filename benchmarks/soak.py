"""Soak: a long engine run of random requests, checked for leaks and stuck blocks.

    python benchmarks/soak.py --requests 10000 [--model smollm2-135m-q4_1] [--max-seconds 3600]

Requests have random prompt lengths, output lengths and sampling settings; about one in ten is
aborted mid-flight, and the KV pool is kept small so that the scheduler preempts. At the end:
no request failed, every block is free or cached (none held), and resident memory after
warm-up (the first 10% of requests) grew by less than 2%. Prints the figures and the machine;
exit status 1 when a check fails. tests/test_soak.py runs a short version."""
from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time

from localllm import LLM, hub
from localllm.sampling import SamplingParams


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def random_params(rng: random.Random) -> SamplingParams:
    greedy = rng.random() < 0.3
    return SamplingParams(temperature=0.0 if greedy else rng.uniform(0.1, 1.5), top_k=rng.choice([0, 1, 5, 40]),
                          top_p=rng.uniform(0.5, 1.0), min_p=rng.choice([0.0, 0.05]),
                          repeat_penalty=rng.choice([1.0, 1.1]), presence_penalty=rng.choice([0.0, 0.5]),
                          seed=rng.randrange(2**31), max_tokens=rng.randint(1, 12),
                          ignore_eos=rng.random() < 0.5, stop=rng.choice([[], ["."], ["\n", "the"]]))


def soak(llm: LLM, n_requests: int, max_seconds: float, seed: int = 0, in_flight: int = 24,
         abort_rate: float = 0.1, warm_fraction: float = 0.1) -> dict:
    """Run n_requests through llm's engine (or as many as max_seconds allows); returns figures."""
    engine, rng = llm._engine, random.Random(seed)
    n_vocab = llm.n_vocab
    live: set[int] = set()
    submitted = finished = aborted = errors = 0
    rss_warm = None
    t0 = time.perf_counter()
    while (submitted < n_requests or live) and time.perf_counter() - t0 < max_seconds:
        while submitted < n_requests and len(live) < in_flight:
            prompt = [rng.randrange(n_vocab) for _ in range(rng.randint(1, 40))]
            live.add(engine.submit(prompt, random_params(rng)))
            submitted += 1
        if live and rng.random() < abort_rate:
            victim = rng.choice(sorted(live))
            if engine.abort(victim):
                aborted += 1
        engine.step()
        for rid in list(live):
            # Only outputs already produced: next_output on an empty queue would step the engine.
            while (seq := engine.sequence(rid)) is not None and seq.payload.outputs:
                try:
                    out = engine.next_output(rid)
                except RuntimeError:
                    errors += 1
                    live.discard(rid)
                    break
                if out.finished:
                    live.discard(rid)
                    finished += 1
                    break
            if engine.sequence(rid) is None:     # aborted, or finished and drained
                live.discard(rid)
        if rss_warm is None and submitted >= max(1, int(n_requests * warm_fraction)):
            rss_warm = rss_bytes()
    for rid in list(live):
        engine.abort(rid)
    pool = engine.pool_state()
    rss_end = rss_bytes()
    return {"requests": submitted, "finished": finished, "aborted": aborted, "errors": errors,
            "preemptions": engine.stats.preemptions, "seconds": round(time.perf_counter() - t0, 1),
            "blocks": pool["blocks"], "blocks_used_at_end": pool["used"], "blocks_cached_at_end": pool["cached"],
            "rss_warm_mb": round((rss_warm or rss_end) / 2**20, 1), "rss_end_mb": round(rss_end / 2**20, 1),
            "rss_growth": (rss_end - (rss_warm or rss_end)) / (rss_warm or rss_end)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-q4_1")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kv-blocks", type=int, default=24, help="small, so that the scheduler preempts")
    args = ap.parse_args()
    llm = LLM(str(hub.pull(args.model, quiet=True)), n_threads=args.threads, n_ctx=1024, seed=0,
              kv_blocks=args.kv_blocks, max_running=16)
    print(f"machine: {platform.processor() or platform.machine()}, {llm._model.isa}, "
          f"{llm.n_threads} threads; model {args.model}", flush=True)
    r = soak(llm, args.requests, args.max_seconds)
    for k, v in r.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    ok = r["errors"] == 0 and r["blocks_used_at_end"] == 0 and r["rss_growth"] < 0.02
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
