"""The server's shared state: its configuration, the model slot, admission (429 / 400 / 503 for
a queue wait past --queue-timeout), the requests in flight, and the drain that SIGINT/SIGTERM
starts: queued requests get 503 at once, running ones have --shutdown-grace seconds to finish
before they are stopped (streams then end with a finish_reason and [DONE])."""
from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..engine.aio import RequestGroup
from ..engine import RequestOutput
from ..llm import LLM
from ..plan import DEFAULT_GPU_MARGIN
from ..engine.speculative import SpecConfig
from .errors import APIError
from .http import ConnectionLimits
from .limits import RequestLimits
from .metrics import ServerMetrics

__all__ = ["ServerConfig", "ServerState", "InFlight"]

log = logging.getLogger("localllm.server")


@dataclass
class ServerConfig:
    """What `localllm serve` was asked for. parallel: sequences generated at once; kv_blocks:
    the shared KV pool (None: LLM's default); max_queue: requests allowed to wait beyond the
    running ones before 429; queue_timeout: seconds a request may wait to start before 503;
    shutdown_grace: seconds running requests get to finish once a stop signal came."""
    model: Optional[str] = None
    n_ctx: int = 4096
    threads: Optional[int] = None
    parallel: int = 16
    kv_blocks: Optional[int] = None
    max_queue: int = 256
    api_key: Optional[str] = None
    n_batch: int = 512
    speculative: Optional[SpecConfig] = None     # speculative decoding for every request
    cache_type_k: str = "f16"                    # the KV cache's types (LLM's cache_type_k / _v)
    cache_type_v: str = "f16"
    n_gpu_layers: int | str = "auto"             # -ngl, --device and --gpu-margin, as LLM takes them
    device: str = "auto"
    gpu_margin: int = DEFAULT_GPU_MARGIN
    limits: RequestLimits = field(default_factory=RequestLimits)
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    queue_timeout: float = 120.0
    shutdown_grace: float = 10.0
    chat_parse_special: bool = False             # control-token texts in chat messages become tokens
    host: str = "127.0.0.1"                      # the address served (the Host check accepts it)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()


@dataclass(eq=False)
class InFlight:
    """One HTTP request's engine requests: started once its first output came."""
    id: int
    group: RequestGroup
    started: bool = False
    stopped_by_shutdown: bool = False


class ServerState:
    """The app's model slot (None while loading) and what the handlers share."""

    def __init__(self, config: ServerConfig, llm: Optional[LLM]):
        self.config = config
        self.llm = llm
        self.load_error: Optional[BaseException] = None
        self.metrics = ServerMetrics(lambda: self.llm.engine if self.llm is not None else None)
        self.inflight: set[InFlight] = set()
        self.draining = False
        self._ids = itertools.count(1)
        self._model_id: Optional[str] = None
        if llm is not None:
            llm.requests.chat_parse_special = config.chat_parse_special

    @property
    def model_id(self) -> str:
        # Named once the model is in: the Path work cost ~40 us of every request (2026-12-06).
        if self._model_id is None:
            if self.llm is None:
                return Path(self.config.model or "model").stem
            self._model_id = Path(self.llm.model_path).stem
        return self._model_id

    def ready(self) -> LLM:
        if self.llm is None:
            if self.load_error is not None:
                raise APIError(500, f"the model failed to load: {self.load_error}")
            raise APIError(503, "Loading model", headers={"Retry-After": "1"})
        return self.llm

    def load(self) -> None:
        c = self.config
        try:
            llm = LLM(c.model, n_threads=c.threads, n_ctx=c.n_ctx, n_batch=c.n_batch, max_running=c.parallel,
                      kv_blocks=c.kv_blocks, speculative=c.speculative, cache_type_k=c.cache_type_k,
                      cache_type_v=c.cache_type_v, n_gpu_layers=c.n_gpu_layers, device=c.device,
                      gpu_margin=c.gpu_margin)
            llm.requests.chat_parse_special = c.chat_parse_special
            llm.engine.start()
            self.llm = llm
            log.info("model %s loaded in %.2f s", llm.model_path, llm.load_time)
        except BaseException as e:
            self.load_error = e
            log.error("loading the model failed: %s", e)
            raise

    def check_model(self, model: Optional[str]) -> None:
        if model is not None and model != self.model_id:
            raise APIError(400, f"model {model!r} is not served here; this server serves {self.model_id!r}",
                           param="model", code="model_not_found")

    def check_choices(self, n: int, n_prompts: int) -> None:
        self.config.limits.check_choices(n, n_prompts, self.config.parallel, self.config.max_queue)

    def admit(self, n_new: int) -> None:
        """429 when the requests would wait beyond the queue's bound."""
        running, waiting = self.llm.engine.counts()
        limit = self.config.parallel + self.config.max_queue
        if running + waiting + n_new > limit:
            self.metrics.rejected.labels("429").inc()
            raise APIError(429, f"the server is busy: {running} requests running, {waiting} waiting "
                           f"(at most {self.config.max_queue} may wait); retry later",
                           headers={"Retry-After": "1"})

    # ---- requests in flight ----
    def track(self, group: RequestGroup) -> InFlight:
        flight = InFlight(next(self._ids), group)
        self.inflight.add(flight)
        return flight

    def untrack(self, flight: InFlight) -> None:
        self.inflight.discard(flight)

    async def first_output(self, flight: InFlight) -> tuple[int, RequestOutput]:
        """The request's first output, before any answer is sent: a request that waited past
        --queue-timeout, or was still queued when shutdown began, is aborted with a 503."""
        timeout = self.config.queue_timeout
        try:
            index, out = await asyncio.wait_for(flight.group.next(), timeout)
        except asyncio.TimeoutError:
            flight.group.abort()
            self.metrics.rejected.labels("503").inc()
            log.info("request %d: no token after %g s in the queue; 503", flight.id, timeout)
            raise APIError(503, f"the request did not start within {timeout:g} s (--queue-timeout): the server "
                           f"is busy; retry later", headers={"Retry-After": "5"}) from None
        flight.started = True
        if out.finish_reason == "abort" and flight.stopped_by_shutdown:
            log.info("request %d: still queued at shutdown; 503", flight.id)
            raise APIError(503, "the server is shutting down; the request did not start",
                           headers={"Retry-After": "1"})
        return index, out

    # ---- shutdown ----
    def begin_shutdown(self) -> None:
        """Drain: from now on new requests get 503 (guard); queued ones are stopped now, running
        ones after the grace period."""
        if self.draining:
            return
        self.draining = True
        queued = [f for f in self.inflight if not f.started]
        running = len(self.inflight) - len(queued)
        grace = self.config.shutdown_grace
        log.info("shutting down: %d requests running get %g s to finish, %d queued are refused (503)",
                 running, grace, len(queued))
        for flight in queued:
            self._stop(flight)
        if running:
            asyncio.get_running_loop().call_later(grace, self._stop_running)

    def _stop_running(self) -> None:
        for flight in list(self.inflight):
            self._stop(flight)

    @staticmethod
    def _stop(flight: InFlight) -> None:
        if flight.group.unfinished:
            flight.stopped_by_shutdown = True
            flight.group.abort()
