"""One request's cost stays its own, against a live `localllm serve`: a normal client's decode
rate while a hostile request runs beside it (thousands of stop strings, a logit_bias over the
whole vocabulary, with the limits raised so they are admitted at all) is at least 80% of its
rate beside a plain request of the same length; a prompt far past the context is refused before
it is tokenized, in well under a second, and the server's memory returns to where it was."""
from __future__ import annotations

import random
import socket
import threading
import time

import httpx
import pytest

from conftest import model_file
from serving import LiveServer

KEY = "smollm2-135m-q4_1"
N_VOCAB = 49152
NORMAL = {"prompt": "The history of the printing press", "max_tokens": 40, "ignore_eos": True, "temperature": 0,
          "stream": True}


def hostile_stops() -> list[str]:
    rng = random.Random(3)          # common letters: many partial matches, no full one
    return ["".join(rng.choice("etaoin shr") for _ in range(64)) for _ in range(4000)]


COMPANIONS = {
    "plain": {},
    "4000 stop strings": {"stop": hostile_stops()},
    "logit_bias on every token": {"logit_bias": {str(t): -0.01 for t in range(N_VOCAB)}},
}


@pytest.fixture(scope="module")
def server():
    with LiveServer(model_file(KEY), "-c", "1024", "--parallel", "4", "--max-stop", "4000", "--max-stop-chars", "64",
                    "--max-logit-bias", str(N_VOCAB), "--max-body", "16M") as srv:
        yield srv


def decode_rate(url: str) -> float:
    """Tokens per second of one streamed request, first chunk to last (prefill excluded)."""
    times = []
    with httpx.stream("POST", f"{url}/v1/completions", json=NORMAL, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0])


def rate_beside(url: str, extra: dict) -> float:
    """decode_rate while a companion request (plain fields + extra) generates beside it."""
    body = {"prompt": "A long story about the sea:", "max_tokens": 900, "ignore_eos": True, "temperature": 0.7,
            "seed": 1, "stream": True, **extra}
    begun, done = threading.Event(), threading.Event()

    def companion() -> None:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
            assert r.status_code == 200, r.read()
            for _ in r.iter_lines():
                begun.set()
                if done.is_set():
                    return          # closing the stream aborts the request
    t = threading.Thread(target=companion)
    t.start()
    try:
        assert begun.wait(60)
        return decode_rate(url)
    finally:
        done.set()
        t.join(60)


def test_a_hostile_request_does_not_slow_the_others(server):
    decode_rate(server.url)                                   # warm up
    best = {name: 0.0 for name in COMPANIONS}
    for _ in range(3):                                        # interleaved: the machine's load hits all alike
        for name, extra in COMPANIONS.items():
            best[name] = max(best[name], rate_beside(server.url, extra))
    for name in COMPANIONS:
        assert best[name] >= 0.8 * best["plain"], best
    m = server.wait_idle()
    assert m["localllm_kv_blocks_used"] == 0


def test_oversize_prompt_is_refused_before_tokenizing_and_memory_returns():
    with LiveServer(model_file(KEY), "-c", "1024", "--parallel", "2") as srv:
        url = f"{srv.url}/v1/completions"
        huge = "lorem ipsum dolor sit amet " * 250_000             # 6.75 M characters, under the body limit
        httpx.post(url, json={"prompt": "Hello", "max_tokens": 4}, timeout=60)
        httpx.post(url, json={"prompt": huge[:2_000_000]}, timeout=60)   # the allocator's first touch
        before = srv.rss()
        for _ in range(5):
            started = time.perf_counter()
            r = httpx.post(url, json={"prompt": huge}, timeout=60)
            assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
            assert "at most 16384 are allowed before tokenizing" in r.json()["error"]["message"]
            assert time.perf_counter() - started < 2.0
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:   # 100 MB announced
                s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: "
                          f"application/json\r\nContent-Length: {100 * 2**20}\r\n\r\n{{".encode())
                assert s.recv(4096).startswith(b"HTTP/1.1 413")          # refused unread
        time.sleep(0.5)
        after = srv.rss()
        assert after <= 1.10 * before, (before, after)
        assert httpx.post(url, json={"prompt": "Hello", "max_tokens": 4}, timeout=60).status_code == 200
