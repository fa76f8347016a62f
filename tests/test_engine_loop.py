"""The engine as a server drives it: its own step loop thread, submits that never wait for a
step, outputs pushed to asyncio consumers, non-blocking abort, and n continuations of one prompt
sharing its KV blocks; and the request builder's refusal of prompts of the wrong type."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from conftest import model_file
from localllm import LLM
from localllm.engine.aio import RequestGroup

KEY = "smollm2-135m-q4_1"


@pytest.fixture(scope="module")
def llm():
    return LLM(str(model_file(KEY)), n_threads=2, n_ctx=1024, seed=0, max_running=8, kv_blocks=256)


def test_submit_never_waits_for_a_step(llm):
    eng = llm.engine
    held, release = threading.Event(), threading.Event()

    def hold_lock():                     # stands in for a long forward
        with eng.lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold_lock)
    t.start()
    held.wait(10)
    try:
        t0 = time.perf_counter()
        req = llm.make_request("Hello there", max_tokens=4, temperature=0)
        rid = eng.submit(req.prompt_ids, req.params)
        assert eng.abort(rid, wait=False)                # queued, carried out after the "step"
        submit_s = time.perf_counter() - t0
        assert eng.counts()[1] >= 1
    finally:
        release.set()
        t.join()
    assert submit_s < 0.5, submit_s
    assert not eng.has_unfinished() and eng.pool.num_used == 0   # the abort happened
    assert eng.next_output(rid) is None


def test_step_loop_delivers_to_asyncio_and_matches_generate(llm):
    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):"]
    kw = dict(max_tokens=12, temperature=0.9, seed=11)
    want = [llm.generate(p, **kw) for p in prompts]

    async def run():
        async with RequestGroup(llm.engine) as group:
            for p in prompts:
                group.submit(llm.make_request(p, **kw))
            texts, toks, reasons = [""] * 3, [[] for _ in prompts], [None] * 3
            async for i, out in group:
                texts[i] += out.text
                toks[i] += out.token_ids
                if out.finished:
                    reasons[i] = out.finish_reason
            return texts, toks, reasons

    texts, toks, reasons = asyncio.run(run())
    assert texts == [w.text for w in want] and toks == [w.token_ids for w in want]
    assert reasons == [w.finish_reason for w in want]
    assert llm.engine.pool.num_used == 0


def test_n_choices_share_the_prompt_blocks(llm):
    eng = llm.engine
    prompt = "A long prompt about the history of the Roman Empire, " * 8    # > 5 full blocks
    req = llm.make_request(prompt, n=3, max_tokens=6, temperature=1.0, seed=5)
    full_blocks = (len(req.prompt_ids) - 1) // 16
    assert full_blocks >= 5
    computed0, hits0 = eng.stats.tokens_computed, eng.pool.stats.hit_blocks

    async def run():
        async with RequestGroup(eng) as group:
            group.submit(req)
            toks = [[] for _ in range(3)]
            async for i, out in group:
                toks[i] += out.token_ids
            return toks

    toks = asyncio.run(run())
    # The 2nd and 3rd choice took the first one's full blocks instead of computing them.
    assert eng.pool.stats.hit_blocks - hits0 >= 2 * full_blocks
    assert eng.stats.tokens_computed - computed0 <= len(req.prompt_ids) + 2 * (len(req.prompt_ids) - 16 * full_blocks) + 3 * 6
    for i in range(3):     # choice i is the request with seed + i, run alone
        assert toks[i] == llm.generate(prompt, max_tokens=6, temperature=1.0, seed=5 + i).token_ids
    assert len({tuple(t) for t in toks}) > 1


def test_abort_from_asyncio_frees_blocks(llm):
    eng = llm.engine

    async def run():
        async with RequestGroup(eng) as group:
            group.submit(llm.make_request("Tell me a story", max_tokens=200, temperature=0, ignore_eos=True))
            n = 0
            async for _, out in group:
                n += len(out.token_ids)
                if n >= 3:
                    break                        # leaving the block aborts the request
        return n

    assert asyncio.run(run()) == 3
    deadline = time.time() + 10
    while eng.has_unfinished() and time.time() < deadline:
        time.sleep(0.01)
    assert not eng.has_unfinished() and eng.pool.num_used == 0


@pytest.mark.parametrize("prompt,error,match", [
    (b"Hi", TypeError, "bytes"),
    (bytearray(b"Hi"), TypeError, "bytearray"),
    ([1.0, 2.0], TypeError, "float"),
    ([1, 2.5], TypeError, "float 2.5 at index 1"),
    ([True, 2], TypeError, "bool"),
    (np.array([1.0, 2.0]), TypeError, "float64"),
    ([1, None], TypeError, "NoneType"),
    (12, TypeError, "int"),
    ([-1], ValueError, "out of range"),
])
def test_prompts_of_the_wrong_type_are_refused(llm, prompt, error, match):
    with pytest.raises(error, match=match):
        llm.generate(prompt, max_tokens=1)
    with pytest.raises(error, match=match):
        llm.make_request(prompt)
    assert not llm.engine.has_unfinished()


def test_integer_arrays_and_tuples_are_prompts(llm):
    ids = llm.tokenize("Hello")
    want = llm.generate(ids, max_tokens=3, temperature=0).token_ids
    assert llm.generate(np.array(ids, dtype=np.int64), max_tokens=3, temperature=0).token_ids == want
    assert llm.generate(tuple(ids), max_tokens=3, temperature=0).token_ids == want
    with pytest.raises(TypeError, match="exactly one"):
        llm.make_request("x", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(TypeError, match="unexpected keyword"):
        llm.make_request("x", temprature=0.5)
