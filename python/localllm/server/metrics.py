"""`GET /metrics`: Prometheus metrics through prometheus-client, in a registry of the app's own
(two servers in one process do not share counters). Latencies are observed by the request
handlers as outputs arrive; the engine's state (requests running and waiting, KV blocks,
prefix-cache hits, preemptions) is read from the engine at each scrape."""
from __future__ import annotations

from typing import Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..engine import Engine, RequestOutput

__all__ = ["ServerMetrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)


class _EngineCollector:
    """The engine's live state, collected at scrape time (takes the engine lock briefly)."""

    def __init__(self, engine: Callable[[], Optional[Engine]]):
        self._engine = engine

    def collect(self):
        engine = self._engine()
        if engine is None:         # still loading
            return
        state = engine.pool_state()
        running, waiting = state["running"], state["waiting"]
        yield _gauge("localllm_requests_running", "Requests generating in the current batch", running)
        yield _gauge("localllm_requests_waiting", "Requests queued, not yet admitted", waiting)
        yield _gauge("localllm_kv_blocks_used", "KV cache blocks referenced by live sequences", state["used"])
        yield _gauge("localllm_kv_blocks_free", "KV cache blocks not referenced (free or holding a "
                     "cached prefix)", state["free"])
        yield _gauge("localllm_kv_blocks_cached", "Unreferenced KV blocks holding a cached prefix",
                     state["evictable"])
        yield _gauge("localllm_kv_blocks_total", "KV cache blocks in the pool", state["blocks"])
        queried, hit = state["query_tokens"], state["hit_tokens"]
        yield _gauge("localllm_prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / "
                     "prompt tokens looked up, since start", hit / queried if queried else 0.0)
        yield _counter("localllm_prefix_cache_queries_tokens", "Prompt tokens looked up in the prefix cache",
                       queried)
        yield _counter("localllm_prefix_cache_hits_tokens", "Prompt tokens found in the prefix cache", hit)
        yield _counter("localllm_preemptions", "Sequences preempted (recomputed later) for lack of KV blocks",
                       engine.stats.preemptions)
        yield _counter("localllm_spec_drafted_tokens", "Speculative decoding: tokens drafted and verified",
                       engine.stats.spec_drafted)
        yield _counter("localllm_spec_accepted_tokens", "Speculative decoding: drafted tokens accepted",
                       engine.stats.spec_accepted)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class ServerMetrics:
    """The server's metrics; `observe(out, previous)` records one engine output."""

    def __init__(self, engine: Callable[[], Optional[Engine]]):
        r = self.registry = CollectorRegistry()
        self.ttft = Histogram("localllm_time_to_first_token_seconds", "Time from request to its first "
                              "token (queueing + prefill)", buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("localllm_inter_token_latency_seconds", "Time between consecutive tokens of "
                             "a request", buckets=_LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("localllm_e2e_request_latency_seconds", "Time from request to its last token",
                             buckets=_E2E_BUCKETS, registry=r)
        self.prompt_tokens = Counter("localllm_prompt_tokens", "Prompt tokens of accepted requests "
                                     "(once per prompt, whatever n)", registry=r)
        self.generation_tokens = Counter("localllm_generation_tokens", "Tokens generated", registry=r)
        self.finished = Counter("localllm_requests_finished", "Requests (choices) finished, by reason",
                                ["finish_reason"], registry=r)
        self.rejected = Counter("localllm_requests_rejected", "Requests refused, by HTTP status", ["status"],
                                registry=r)
        r.register(_EngineCollector(engine))

    def observe(self, out: RequestOutput, previous: Optional[float]) -> Optional[float]:
        """Record one output of a request; `previous` is the time of its previous token (None
        before the first). Returns the time to pass next time."""
        if out.token_ids:
            if previous is None:
                if out.times is not None and out.times.ttft is not None:
                    self.ttft.observe(out.times.ttft)
            else:
                self.itl.observe(out.created - previous)
            self.generation_tokens.inc(len(out.token_ids))
            previous = out.created
        if out.finished:
            self.finished.labels(out.finish_reason or "unknown").inc()
            times = out.times
            if times is not None and times.finished is not None and out.finish_reason in ("stop", "length"):
                self.e2e.observe(times.finished - times.submitted)
        return previous

    def render(self) -> bytes:
        return generate_latest(self.registry)
