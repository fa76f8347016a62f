"""Bounded load test of a live `localllm serve` (SmolLM2): 64 concurrent streaming clients, a
quarter of them disconnecting at random points, on a KV pool small enough to force preemption.
No 5xx; every completed stream equals the same request run alone (its seed); afterwards every
KV block is free or cached."""
from __future__ import annotations

import asyncio
import random

import openai

from conftest import model_file
from localllm import LLM
from serving import LiveServer


KEY = "smollm2-135m-q4_1"
MODEL = model_file(KEY).stem
CLIENTS = 64
TOPICS = ["the sea", "a robot", "winter", "coffee", "a lost key", "the moon", "trains", "a garden"]


def plan(rng: random.Random) -> list[dict]:
    jobs = []
    leavers = set(rng.sample(range(CLIENTS), CLIENTS // 4))
    for i in range(CLIENTS):
        jobs.append({"prompt": f"Request {i}: write about {TOPICS[i % len(TOPICS)]}." + " Please." * (i % 5),
                     "max_tokens": rng.randrange(8, 25), "seed": 1000 + i, "temperature": 0.8,
                     "leave_after": rng.randrange(1, 6) if i in leavers else None})
    return jobs


async def run_client(client, job: dict) -> tuple[str, bool]:
    """(text, completed): the stream's text, and whether it ran to its end."""
    text, n = "", 0
    stream = await client.completions.create(model=MODEL, prompt=job["prompt"], max_tokens=job["max_tokens"],
                                             seed=job["seed"], temperature=job["temperature"], stream=True)
    async with stream:
        async for chunk in stream:
            text += chunk.choices[0].text if chunk.choices else ""
            n += 1
            if job["leave_after"] is not None and n >= job["leave_after"]:
                return text, False           # leaving the block closes the connection
    return text, True


async def run_all(url: str, jobs: list[dict]) -> list:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    try:
        return await asyncio.wait_for(asyncio.gather(*(run_client(client, j) for j in jobs),
                                                     return_exceptions=True), timeout=300)
    finally:
        await client.close()


def test_64_streaming_clients_with_disconnects():
    jobs = plan(random.Random(0))
    # 17 blocks of 16 tokens for 16 sequences of ~30-50 tokens: the pool runs dry (preemption).
    with LiveServer(model_file(KEY), "-c", "256", "--parallel", "16", "--kv-memory", "6M") as srv:
        results = asyncio.run(run_all(srv.url, jobs))
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, errors[:3]                     # no 5xx (or any error) for anyone
        m = srv.wait_idle(timeout=30)
        assert m["localllm_kv_blocks_used"] == 0
        assert m["localllm_kv_blocks_free"] == m["localllm_kv_blocks_total"]
        assert m["localllm_requests_running"] == 0 and m["localllm_requests_waiting"] == 0
        assert m["localllm_preemptions_total"] > 0
        # Leavers' requests were aborted, not run to their end.
        assert m.get('localllm_requests_finished_total{finish_reason="abort"}', 0) >= 1
    completed = [(j, text) for j, (text, done) in zip(jobs, results) if done]
    assert len(completed) >= CLIENTS - CLIENTS // 4       # (a leaver may finish before it leaves)
    llm = LLM(str(model_file(KEY)), n_threads=2, n_ctx=256, max_running=1)
    for job, text in completed:                            # each one alone, same seed
        alone = llm.generate(job["prompt"], max_tokens=job["max_tokens"], seed=job["seed"],
                             temperature=job["temperature"])
        assert text == alone.text, job
