#!/usr/bin/env python3
"""`localllm serve` against llama.cpp's own `llama-server` on the same GGUF files, in one run,
one server at a time, with the same parallel slots and threads; the load generator is serve.py.

    python benchmarks/serve_compare.py [-m MODEL ...] [-c 1 4 16] [--slots 16] [-t 2] [--json OUT --png OUT]

llama-server is built by llamaserver_build.py from the llama.cpp source llama-cpp-python 0.3.36
vendors (the release the CPU benchmarks compare against) and run as its README recommends for
CPU: `-np SLOTS -c SLOTS*CTX -t THREADS` (continuous batching is its default; each slot gets
CTX tokens). localllm serve gets `--parallel SLOTS -c CTX -t THREADS` and a KV pool of the same
SLOTS*CTX tokens. llama-server runs as its own docs run it (OpenMP's default waiting); the
servers run one at a time, so neither spins against the other.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llamacpp_venv import DEFAULT_MODELS  # noqa: E402
from llamaserver_build import ensure_llama_server  # noqa: E402
import machine  # noqa: E402
from serve import bench, plot  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def start_localllm(model: Path, port: int, slots: int, ctx: int, threads: int, log) -> subprocess.Popen:
    sys.path.insert(0, str(REPO / "python"))
    from localllm.engine import kv_bytes_per_token
    from localllm.gguf import GGUFFile
    kv_bytes = slots * ctx * kv_bytes_per_token(GGUFFile(str(model)).metadata)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / d) for d in ("python", "cli", "convert")))
    cmd = [sys.executable, "-m", "localllm_cli", "serve", "-m", str(model), "--port", str(port),
           "--parallel", str(slots), "-c", str(ctx), "-t", str(threads), "--kv-memory", f"{kv_bytes // 1024}k",
           "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def start_llama_server(binary: Path, model: Path, port: int, slots: int, ctx: int, threads: int,
                       log) -> subprocess.Popen:
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
           "-c", str(slots * ctx), "-t", str(threads), "-tb", str(threads)]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("-c", "--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("-n", "--num-prompts", type=int, default=None)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=512, help="context per slot")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--input-words", type=int, default=96)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--servers", nargs="+", default=["localllm", "llama-server"])
    ap.add_argument("--json", default="serve_compare.json")
    ap.add_argument("--png", default="serve_compare.png")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "python"))
    from localllm import hub
    binary = ensure_llama_server() if "llama-server" in args.servers else None
    report = {"machine": machine.describe(args.threads), "slots": args.slots, "ctx_per_slot": args.ctx,
              "input_words": args.input_words, "output_len": args.output_len, "runs": []}
    for key in args.models:
        model = Path(hub.resolve_model(key))
        for server in args.servers:
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            with open(f"/tmp/serve_compare_{server}.log", "w") as log:
                proc = (start_localllm(model, port, args.slots, args.ctx, args.threads, log) if server == "localllm"
                        else start_llama_server(binary, model, port, args.slots, args.ctx, args.threads, log))
                try:
                    _wait_healthy(url, proc)
                    report["runs"] += bench(url, None, args.concurrency, None, args.num_prompts, args.input_words,
                                            args.output_len, {"server": server, "model": key})
                finally:
                    proc.terminate()
                    proc.wait(30)
            with open(args.json, "w") as f:          # kept current: a long run can be read as it goes
                json.dump(report, f, indent=1)
    plot(report["runs"], args.png)
    print_table(report)


def print_table(report: dict) -> None:
    m = report["machine"]
    print(f"\n{machine.line(m)}; {report['slots']} slots")
    print("| model | clients | localllm tok/s | llama-server tok/s | ratio | localllm p50 TTFT | llama-server p50 TTFT "
          "| localllm p50 ITL | llama-server p50 ITL |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    by = {(r["server"], r["model"], r["concurrency"]): r for r in report["runs"]}
    for (server, model, c), ours in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][2] or 0)):
        if server != "localllm":
            continue
        theirs = by.get(("llama-server", model, c))
        if theirs is None:
            continue
        print(f"| {model} | {c} | {ours['output_tok_s']:.1f} | {theirs['output_tok_s']:.1f} | "
              f"{ours['output_tok_s'] / theirs['output_tok_s']:.2f}x | {ours['ttft']['p50_ms']:.0f} ms | "
              f"{theirs['ttft']['p50_ms']:.0f} ms | {ours['itl']['p50_ms']:.1f} ms | {theirs['itl']['p50_ms']:.1f} ms |")


if __name__ == "__main__":
    main()
