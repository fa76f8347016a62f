#!/usr/bin/env python3
"""JSON-schema constrained generation through `localllm serve` and llama.cpp's `llama-server`, on
the same GGUF file, the same schema (structured.py's) and the same prompts, in one run, one server
at a time (same slots, context and threads: serve_compare.py's settings).

For each server and concurrency: N requests with the schema in llama-server's `json_schema`
field (both servers take it), then the same prompts unconstrained with each request's
max_tokens set to its constrained length (ignore_eos), so both runs generate the same tokens.
Reports output tok/s of each, their ratio, and how many constrained outputs the schema accepts
(jsonschema). llama-server is built by llamaserver_build.py.

    python benchmarks/structured_vs_llamaserver.py [-m smollm2-135m-q4_1] [-c 1 16] [-t 2] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402
from llamaserver_build import ensure_llama_server  # noqa: E402
from serve_compare import REPO, _free_port, _wait_healthy, start_llama_server, start_localllm  # noqa: E402

sys.path.insert(0, str(REPO / "python"))
from structured import SCHEMA, prompt  # noqa: E402


def _complete(url: str, body: dict) -> tuple[str, int, str]:
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
    r.raise_for_status()
    out = r.json()
    return out["choices"][0]["text"], out["usage"]["completion_tokens"], out["choices"][0]["finish_reason"]


def _together(url: str, bodies: list[dict]) -> tuple[float, list[tuple[str, int, str]]]:
    """Output tok/s of sending all bodies at once, and each answer's (text, tokens, finish reason)."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: _complete(url, b), bodies))
    return sum(a[1] for a in answers) / (time.perf_counter() - t0), answers


def pair(url: str, n: int, tokens: int, rep: int) -> tuple[float, float, int, int]:
    """(unconstrained tok/s, json_schema tok/s, outputs that ended by themselves (not at
    max_tokens), of those the ones the schema accepts) on the same prompts and token counts."""
    base = [{"prompt": prompt(i), "temperature": 0.8, "seed": 100 * rep + i} for i in range(n)]
    schema_tps, answers = _together(url, [dict(b, max_tokens=tokens, json_schema=SCHEMA) for b in base])
    valid = ended = 0
    for text, _, finish in answers:
        if finish == "length":   # cut off inside the structure: not a complete output
            continue
        ended += 1
        try:
            jsonschema.validate(json.loads(text), SCHEMA)
            valid += 1
        except (json.JSONDecodeError, jsonschema.ValidationError):
            pass
    free_tps, _ = _together(url, [dict(b, max_tokens=a[1], ignore_eos=True) for b, a in zip(base, answers)])
    return free_tps, schema_tps, ended, valid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="smollm2-135m-q4_1")
    ap.add_argument("-c", "--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=512, help="context per slot")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--servers", nargs="+", default=["localllm", "llama-server"])
    args = ap.parse_args()
    from localllm import hub
    print(machine.line(machine.describe(args.threads)))
    binary = ensure_llama_server() if "llama-server" in args.servers else None
    model = Path(hub.resolve_model(args.model))
    for server in args.servers:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(f"/tmp/structured_vs_{server}.log", "w") as log:
            proc = (start_localllm(model, port, args.slots, args.ctx, args.threads, log) if server == "localllm"
                    else start_llama_server(binary, model, port, args.slots, args.ctx, args.threads, log))
            try:
                _wait_healthy(url, proc)
                _together(url, [{"prompt": "warm up", "max_tokens": 4, "json_schema": SCHEMA}])
                for n in args.concurrency:
                    runs = [pair(url, n, args.tokens, rep) for rep in range(args.reps)]
                    free = statistics.median(r[0] for r in runs)
                    schema = statistics.median(r[1] for r in runs)
                    ratio = statistics.median(r[1] / r[0] for r in runs)
                    ended, valid = sum(r[2] for r in runs), sum(r[3] for r in runs)
                    print(f"{server:12s} {args.model} n={n:2d}: unconstrained {free:7.1f} tok/s, json_schema "
                          f"{schema:7.1f} tok/s (median ratio {100 * ratio:5.1f}%, {args.reps} pairs), "
                          f"{ended}/{n * args.reps} outputs ended before max_tokens, {valid} of them "
                          f"schema-valid", flush=True)
            finally:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    main()
