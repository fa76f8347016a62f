"""Hostile load: 64 clients on loopback against a live `localllm serve`, for a bounded time,
mixing normal seeded requests with oversize, slow, disconnecting and costly ones.

    python benchmarks/hostile_load.py [--seconds 180] [--clients 64] [--model smollm2-135m-q4_1]

Each client loops until the deadline, picking a job at random: normal (seeded, streamed or not;
its text must equal the same request run alone on the idle server first), oversize (a prompt
past the character bound: 400; an announced body past --max-body: 413), slow (headers or a body
that never finish: closed, 408 for the body), disconnecting (a stream left after a few chunks),
costly (16 stop strings of 256 characters and 300 logit_bias entries: served normally).
Checks at the end: no 5xx but 503 (queue timeout, connection cap); every KV block free (the
/metrics gauges); resident memory after the first fifth of the run grew by less than 5%; the
seeded references unchanged. Prints the figures and the machine; exit status 1 when a check
fails. Only 127.0.0.1 is used; the server is started and stopped here. tests/
test_server_hostile_load.py runs a short version."""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REFERENCES = [{"prompt": f"Story {i}: a tale about {topic}.", "max_tokens": 24, "seed": 100 + i, "temperature": 0.8}
              for i, topic in enumerate(["the sea", "a robot", "winter", "coffee", "a key", "the moon", "trains",
                                         "a garden"])]
JOBS = [("normal", 0.45), ("oversize", 0.15), ("slow", 0.1), ("disconnect", 0.15), ("costly", 0.15)]
HEADER_S, BODY_S = 3.0, 4.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def metrics(url: str) -> dict[str, float]:
    """The server's unlabelled /metrics samples (name -> value), read by prometheus_client's parser."""
    # A generous timeout: on a loaded 2-core machine the 64 clients, the server and this sampler
    # share the cores, and a slow sample is not what the run measures.
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if not s.labels}


class Load:
    """The run's tallies: (job, outcome) counts, failures, RSS and KV samples."""

    def __init__(self, url: str, port: int, references: list[str], rng: random.Random):
        self.url, self.port, self.references, self.rng = url, port, references, rng
        self.outcomes: collections.Counter = collections.Counter()
        self.failures: list[str] = []

    def fail(self, message: str) -> None:
        if len(self.failures) < 20:
            self.failures.append(message)

    async def normal(self, client: httpx.AsyncClient) -> str:
        i = self.rng.randrange(len(REFERENCES))
        stream = self.rng.random() < 0.5
        body = dict(REFERENCES[i], stream=stream)
        if not stream:
            r = await client.post(f"{self.url}/v1/completions", json=body)
            if r.status_code != 200:
                return str(r.status_code)
            text = r.json()["choices"][0]["text"]
        else:
            text = ""
            async with client.stream("POST", f"{self.url}/v1/completions", json=body) as r:
                if r.status_code != 200:
                    return str(r.status_code)
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        text += json.loads(line[6:])["choices"][0]["text"]
        if text != self.references[i]:
            self.fail(f"reference {i} changed under load: {text!r} != {self.references[i]!r}")
        return "200"

    async def oversize(self, client: httpx.AsyncClient) -> str:
        if self.rng.random() < 0.5:
            r = await client.post(f"{self.url}/v1/completions", json={"prompt": "spam " * 40_000})
            return str(r.status_code)
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: "
                         f"application/json\r\nContent-Length: {200 * 2**20}\r\n\r\n".encode())
            await writer.drain()
            return (await asyncio.wait_for(reader.readline(), 30)).decode().split(" ")[1]
        finally:
            writer.close()

    async def slow(self, client: httpx.AsyncClient) -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            if self.rng.random() < 0.5:     # headers that never end
                writer.write(b"POST /v1/completions HTTP/1.1\r\nX-A: 1\r\n")
            else:                           # a body shorter than announced
                writer.write(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: "
                             f"application/json\r\nContent-Length: 500\r\n\r\n{{\"prompt\": ".encode())
            await writer.drain()
            started = time.perf_counter()
            data = await asyncio.wait_for(reader.read(), HEADER_S + BODY_S + 20)
            if time.perf_counter() - started > max(HEADER_S, BODY_S) + 10:
                self.fail("a slow connection was held past its timeout")
            return "closed" if not data else data.split(b" ")[1].decode()
        finally:
            writer.close()

    async def disconnect(self, client: httpx.AsyncClient) -> str:
        body = {"prompt": "Tell me everything about rivers.", "max_tokens": 200, "stream": True,
                "seed": self.rng.randrange(1000)}
        async with client.stream("POST", f"{self.url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                return str(r.status_code)
            leave_after = self.rng.randrange(1, 6)
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    leave_after -= 1
                    if leave_after == 0:
                        return "left"
        return "200"

    async def costly(self, client: httpx.AsyncClient) -> str:
        stops = ["".join(self.rng.choice("etaoin shr") for _ in range(256)) for _ in range(16)]
        bias = {str(t): -0.5 for t in self.rng.sample(range(40000), 300)}
        r = await client.post(f"{self.url}/v1/completions", json={"prompt": "List some fruits:", "max_tokens": 32,
                                                                  "stop": stops, "logit_bias": bias})
        return str(r.status_code)

    async def client_loop(self, deadline: float) -> None:
        names, weights = zip(*JOBS)
        async with httpx.AsyncClient(timeout=120) as client:
            while time.perf_counter() < deadline:
                job = self.rng.choices(names, weights)[0]
                try:
                    outcome = await getattr(self, job)(client)
                except (httpx.TransportError, ConnectionError, asyncio.TimeoutError) as e:
                    outcome = type(e).__name__
                self.outcomes[(job, outcome)] += 1
                if outcome.startswith("5") and outcome != "503":
                    self.fail(f"{job}: {outcome}")


def check_outcomes(outcomes: collections.Counter) -> list[str]:
    """What each job may end with; anything else is a failure."""
    allowed = {"normal": {"200", "503"}, "oversize": {"400", "413"}, "slow": {"closed", "408"},
               "disconnect": {"left", "200", "503"}, "costly": {"200", "503"}}
    return [f"{job} ended {outcome} x{n}" for (job, outcome), n in outcomes.items() if outcome not in allowed[job]]


async def drive(load: Load, clients: int, seconds: float, pid: int) -> list[tuple[float, int, dict]]:
    """Run the clients; sample (elapsed, RSS, KV gauges) every few seconds."""
    started = time.perf_counter()
    tasks = [asyncio.create_task(load.client_loop(started + seconds)) for _ in range(clients)]
    samples = []
    while not all(t.done() for t in tasks):
        m = await asyncio.to_thread(metrics, load.url)
        samples.append((time.perf_counter() - started, rss(pid), {k: v for k, v in m.items() if "kv" in k}))
        await asyncio.wait(tasks, timeout=max(2.0, seconds / 30))
    for t in tasks:
        t.result()
    return samples


def run(model: str, seconds: float, clients: int = 64, seed: int = 0, log=sys.stderr) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "localllm_cli", "serve", "-m", model, "--port", str(port), "-c", "1024",
           "--parallel", "16", "--max-queue", "64", "--queue-timeout", "60", "--header-timeout", str(HEADER_S),
           "--body-timeout", str(BODY_S), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.1)
        references = [httpx.post(f"{url}/v1/completions", json=r, timeout=120).json()["choices"][0]["text"]
                      for r in REFERENCES]
        load = Load(url, port, references, random.Random(seed))
        started = time.perf_counter()
        samples = asyncio.run(drive(load, clients, seconds, proc.pid))
        wall = time.perf_counter() - started
        idle_deadline = time.time() + 60
        while (m := metrics(url))["localllm_kv_blocks_used"] > 0 and time.time() < idle_deadline:
            time.sleep(0.2)
        after = [httpx.post(f"{url}/v1/completions", json=r, timeout=120).json()["choices"][0]["text"]
                 for r in REFERENCES]
        warm = [s for s in samples if s[0] >= seconds / 5] or samples
        rss_warm, rss_end = warm[0][1], rss(proc.pid)
        failures = load.failures + check_outcomes(load.outcomes)
        if after != references:
            failures.append("the seeded references changed after the load")
        if m["localllm_kv_blocks_used"] != 0:
            failures.append(f"{m['localllm_kv_blocks_used']:.0f} KV blocks still used when idle")
        if rss_end > 1.05 * rss_warm:
            failures.append(f"RSS grew {rss_warm / 2**20:.0f} -> {rss_end / 2**20:.0f} MiB")
        return {"seconds": round(wall, 1), "clients": clients, "requests": sum(load.outcomes.values()),
                "outcomes": {f"{job} {outcome}": n for (job, outcome), n in sorted(load.outcomes.items())},
                "kv_blocks_used_max": max(s[2].get("localllm_kv_blocks_used", 0) for s in samples),
                "kv_blocks_used_idle": m["localllm_kv_blocks_used"],
                "rss_mib": {"warm": round(rss_warm / 2**20, 1), "end": round(rss_end / 2**20, 1),
                            "max": round(max(s[1] for s in samples) / 2**20, 1)},
                "references_unchanged": after == references, "failures": failures}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-q4_1")
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from localllm import hub
    result = run(str(hub.resolve_model(args.model)), args.seconds, args.clients, args.seed)
    result["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    print(json.dumps(result, indent=2))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
