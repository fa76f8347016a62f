"""Engine outputs for asyncio consumers.

The engine's step loop runs on its own thread (`Engine.start`); each request submitted here has
a sink that hands its outputs to the consumer's event loop (one `call_soon_threadsafe`
wake-up per burst of outputs), so a coroutine awaits them without ever taking the engine's
lock or waiting for a step.

    async with RequestGroup(engine) as group:
        group.submit(llm.make_request("Once upon a time", n=2, max_tokens=16))
        async for index, out in group:      # (choice index, RequestOutput), as produced
            ...

Leaving the `async with` block (done, an exception, or the task cancelled because the client
went away) aborts every request of the group that has not finished; the engine frees their
blocks at its next step.

An embedding job is awaited the same way (`embedding_finished`): the step that pools its last
sequence wakes the coroutine, with no thread waiting on the job in between.
"""
from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from typing import AsyncIterator, Optional

from .core import Engine, RequestOutput
from .embedding_jobs import EmbeddingJob
from .requests import EngineRequest

__all__ = ["RequestGroup", "embedding_finished"]


class _Dispatcher:
    """Hands outputs from the engine's thread to one event loop's queues with one wake-up of the
    loop per burst (a step's outputs for every request), not one per output: each
    call_soon_threadsafe writes to the loop's self-pipe."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._items: deque = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, queue: asyncio.Queue, item) -> None:      # engine thread
        with self._lock:
            self._items.append((queue, item))
            if self._scheduled:
                return
            self._scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:                               # event loop
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for queue, item in items:
            queue.put_nowait(item)


_dispatchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Dispatcher] = weakref.WeakKeyDictionary()


def _dispatcher(loop: asyncio.AbstractEventLoop) -> _Dispatcher:
    d = _dispatchers.get(loop)
    if d is None:
        d = _dispatchers[loop] = _Dispatcher(loop)
    return d


class RequestGroup:
    """The outputs of several engine requests (a request's `n` choices, several prompts)
    merged into one asyncio stream of (index, RequestOutput); index counts the group's
    requests in submission order."""

    def __init__(self, engine: Engine, loop: Optional[asyncio.AbstractEventLoop] = None):
        self.engine = engine
        self.loop = loop or asyncio.get_running_loop()
        self._dispatch = _dispatcher(self.loop)
        self._queue: asyncio.Queue = asyncio.Queue()
        self.request_ids: list[int] = []
        self._open = 0

    def submit(self, request: EngineRequest) -> list[int]:
        """Queue the request's n choices (they share the prompt's KV blocks); returns their
        group indices. Raises ValueError (as Engine.submit) for a request that cannot fit."""
        first = len(self.request_ids)
        indices = list(range(first, first + request.n))
        ids = self.engine.submit_group(request.prompt_ids, [request.choice_params(i) for i in range(request.n)],
                                       sinks=[self._sink(i) for i in indices])
        self.request_ids += ids
        self._open += len(ids)
        self.engine.start()
        return indices

    def _sink(self, index: int):
        put, queue = self._dispatch.put, self._queue

        def sink(out: RequestOutput) -> None:       # runs on the engine's thread
            put(queue, (index, out))
        return sink

    async def next(self) -> tuple[int, RequestOutput]:
        """The next (index, output); waits for it (callers bound the wait with a timeout)."""
        index, out = await self._queue.get()
        if out.finished:
            self._open -= 1
        return index, out

    async def __aiter__(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        while self._open:
            yield await self.next()

    @property
    def unfinished(self) -> int:
        """Requests of the group whose last output has not been taken yet."""
        return self._open

    def abort(self) -> None:
        """Abort the group's unfinished requests without waiting for the engine's step."""
        if self._open:
            for rid in self.request_ids:
                self.engine.abort(rid, wait=False)

    async def __aenter__(self) -> RequestGroup:
        return self

    async def __aexit__(self, *exc) -> None:
        self.abort()


async def embedding_finished(engine: Engine, job: EmbeddingJob, stall_s: float) -> bool:
    """Queue the job for the engine's step-loop thread and wait until its last sequence is pooled
    (or its step failed: job.error): True. False when it made no progress (generation holding
    the KV pool) for stall_s to 2 x stall_s; the caller then cancels it. The job is cancelled if
    this coroutine is (its client went away)."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()

    def resolve() -> None:                      # event loop
        if not finished.done():
            finished.set_result(None)

    def wake() -> None:                         # the thread that ran the job's last step
        try:
            loop.call_soon_threadsafe(resolve)
        except RuntimeError:                    # the loop is closed: nobody waits any more
            pass

    job.on_done = wake
    engine.submit_embedding(job)
    engine.start()
    try:
        seen = (job.next, job.pos)
        while not finished.done():
            await asyncio.wait((finished,), timeout=stall_s)
            if not finished.done():
                if (job.next, job.pos) == seen:
                    return False
                seen = (job.next, job.pos)
        return True
    except BaseException:
        if not job.done.is_set():
            engine.embeddings.cancel(job, RuntimeError("cancelled: its caller went away"))
        raise
