"""SIGINT to a live `localllm serve` with 16 requests running (12 streams, 4 not) and 16 queued:
every client gets a well-formed ending. Running streams end with a chunk carrying a
finish_reason and `data: [DONE]`; running non-streaming requests finish within the grace period
or get an OpenAI 503 body; queued requests get a 503 body (never a 200 header with nothing
after it); new connections are refused; the log has one line per stopped request and no
traceback."""
from __future__ import annotations

import concurrent.futures as cf
import json
import signal
import threading
import time

import httpx
import pytest

from conftest import model_file
from serving import LiveServer

KEY = "smollm2-135m-q4_1"
GRACE = 3.0
LONG = {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "temperature": 0.8, "seed": 5}


def run_client(url: str, stream: bool, first_chunk: threading.Event) -> dict:
    """One request to its end: status, and for a 200 stream its data lines."""
    try:
        with httpx.Client(timeout=60) as client:
            with client.stream("POST", f"{url}/v1/completions", json=dict(LONG, stream=stream)) as r:
                if r.status_code != 200 or not stream:
                    return {"status": r.status_code, "body": json.loads(r.read())}
                lines = []
                for line in r.iter_lines():
                    if line:
                        lines.append(line)
                        first_chunk.set()
                return {"status": 200, "lines": lines}
    except httpx.TransportError as e:
        return {"status": None, "error": repr(e)}


def wait_for(server, running: int, waiting: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = server.metrics()
        if m["localllm_requests_running"] == running and m["localllm_requests_waiting"] == waiting:
            return
        time.sleep(0.05)
    raise TimeoutError(f"never {running} running and {waiting} waiting: {m}")


def test_sigint_gives_every_client_a_well_formed_ending(tmp_path):
    log = tmp_path / "server.log"
    srv = LiveServer(model_file(KEY), "-c", "512", "--parallel", "16", "--max-queue", "32",
                     "--shutdown-grace", str(GRACE), "--log-level", "info", log=log)
    with srv, cf.ThreadPoolExecutor(32) as pool:
        started = [threading.Event() for _ in range(32)]
        kinds = [True] * 12 + [False] * 4 + [True] * 8 + [False] * 8     # 16 running, then 16 queued
        futures = []
        for i in range(16):
            futures.append(pool.submit(run_client, srv.url, kinds[i], started[i]))
        wait_for(srv, 16, 0)
        assert all(e.wait(60) for e in started[:12])                     # every running stream has begun
        time.sleep(0.5)
        for i in range(16, 32):
            futures.append(pool.submit(run_client, srv.url, kinds[i], started[i]))
        wait_for(srv, 16, 16)
        signal_at = time.perf_counter()
        srv.proc.send_signal(signal.SIGINT)
        results = [f.result(timeout=GRACE + 30) for f in futures]
        srv.proc.wait(GRACE + 20)
        exited_after = time.perf_counter() - signal_at
        with pytest.raises(httpx.TransportError):
            httpx.post(f"{srv.url}/v1/completions", json={"prompt": "x"}, timeout=5)
    for i, r in enumerate(results):
        if i < 12:        # running streams: a last chunk with its finish_reason, then [DONE]
            assert r["status"] == 200 and r["lines"][-1] == "data: [DONE]", r
            last = json.loads(r["lines"][-2].removeprefix("data: "))
            assert last["choices"][0]["finish_reason"] in ("abort", "length"), last
        elif i < 16:      # running, not streamed: the whole answer, or an OpenAI 503 body
            assert r["status"] in (200, 503), r
            if r["status"] == 503:
                assert "shutting down" in r["body"]["error"]["message"]
        else:             # queued: 503 with an OpenAI body, streams included
            assert r["status"] == 503 and "shutting down" in r["body"]["error"]["message"], r
    assert exited_after < GRACE + 10
    text = log.read_text()
    assert "Traceback" not in text and "CancelledError" not in text, text[-3000:]
    assert text.count("still queued at shutdown") == 16
    stopped = sum(1 for r in results[:16] if r["status"] == 503 or
                  '"finish_reason": "abort"' in "".join(r.get("lines", [])))
    assert text.count("stopped by shutdown") == stopped
