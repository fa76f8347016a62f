"""Continuous-batching engine: many requests, one forward call per step, paged KV with prefix reuse.

Requests (prompt ids + `SamplingParams`) are submitted and get an id; each step the scheduler
(`localllm.engine.scheduler`) builds one batch mixing decode tokens of running sequences with prefill
chunks of new ones, the model runs it in ONE `forward` call, and every sequence whose chunk
reached its last token samples its next token from its own logits row. Finished sequences leave
and waiting ones join at the very next step.

Threading. A lock guards the scheduler, the pool and the model during a step. `submit` never
takes it: a new request goes into an inbox (under a small lock of its own) that the next step
drains, so submitting never waits for a forward. Two ways to drive steps, which can be mixed:

- consumer-driven: `next_output(id)` steps until that request has an output ready (outputs of
  every other request produced meanwhile are queued for them); two streams iterated alternately
  from one thread both progress, and nothing runs when nobody asks;
- the step loop: `start()` runs a daemon thread that steps while there is work and sleeps when
  there is none; requests submitted with a `sink` get each output pushed to it from that thread
  (`localllm.engine.aio` turns this into asyncio iteration), which is how the server runs.

Batch invariance: every sequence's logits come from its own row of a forward whose kernels do
not depend on the batch's shape, its sampler is its own (own seed, own penalty history), and a
preempted sequence resumes from exactly its tokens: so a request's output does not depend on
what else runs beside it.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence as Seq

import numpy as np

from .constraints import Constraints, StepMasks
from .embedding_jobs import EmbeddingBatch, EmbeddingJob, EmbeddingQueue, padded_tables
from .kv_blocks import NULL_BLOCK, BlockPool, BlockTable
from ..sampling import SamplingParams, StopMatcher, make_sampler
from .scheduler import Schedule, Scheduler, Sequence
from ..text.tokenizer import StreamDecoder

__all__ = ["Engine", "EngineStats", "OutputSink", "RequestOutput", "RequestTimes", "kv_bytes_per_token"]

log = logging.getLogger("localllm.engine")


def kv_bytes_per_token(metadata: dict, cache_type_k: str = "f16", cache_type_v: str = "f16") -> int:
    """KV cache bytes one token takes (K and V of every layer, in the cache's types: "f16",
    "q8_0", "q4_0"), from GGUF metadata; used to turn a memory size into a number of blocks
    before the model is loaded (the same sizes as the C++ cache's, csrc/model/kv_cache.cpp)."""
    from ..quants import GGMLType, row_bytes
    arch = metadata["general.architecture"]
    n_head = int(metadata[f"{arch}.attention.head_count"])
    n_head_kv = int(metadata.get(f"{arch}.attention.head_count_kv", n_head))
    head_dim = int(metadata.get(f"{arch}.attention.key_length",
                                int(metadata[f"{arch}.embedding_length"]) // n_head))
    width = n_head_kv * head_dim
    per_layer = sum(row_bytes(GGMLType[t.upper()], width) for t in (cache_type_k, cache_type_v))
    return int(metadata[f"{arch}.block_count"]) * per_layer


@dataclass
class RequestTimes:
    """Wall-clock moments of one request (time.perf_counter())."""
    submitted: float = 0.0
    first_token: Optional[float] = None
    finished: Optional[float] = None
    drafted: int = 0              # speculative decoding: tokens drafted for this request
    accepted: int = 0             # ... and accepted

    @property
    def ttft(self) -> Optional[float]:
        """Time to first token (queueing + prefill), seconds."""
        return None if self.first_token is None else self.first_token - self.submitted


@dataclass
class RequestOutput:
    """What one step produced for one request."""
    request_id: int
    token_ids: list[int]                  # tokens appended to the output in this step
    text: str                             # text completed in this step (whole UTF-8 characters)
    logprobs: list[dict] = field(default_factory=list)
    finished: bool = False
    finish_reason: Optional[str] = None   # "stop" (EOS/EOT or a stop string), "length", "abort", "error"
    logits: Optional[np.ndarray] = None   # [n_vocab] the row this step sampled from (keep_logits)
    times: Optional[RequestTimes] = None  # the request's timings so far (shared, kept up to date)
    error: Optional[BaseException] = None # why it failed (finish_reason "error"); next_output raises it
    created: float = 0.0                  # time.perf_counter() when the step produced it


# Receives each output of a request from the thread that ran the step (the lock is held: it
# must only hand the output on, e.g. loop.call_soon_threadsafe, never block or step).
OutputSink = Callable[[RequestOutput], None]


@dataclass
class EngineStats:
    """Counters since the engine was built."""
    steps: int = 0
    tokens_computed: int = 0      # tokens fed to the model (prefill + recompute + decode)
    decode_tokens: int = 0        # ... of which single next tokens of running sequences
    max_batch_tokens_seen: int = 0
    max_running_seen: int = 0
    preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    spec_verifications: int = 0   # speculative decoding: steps that verified a draft, per sequence
    spec_drafted: int = 0         # ... tokens drafted (and fed to the target)
    spec_accepted: int = 0        # ... of which accepted (emitted without a step of their own)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0 without speculation)."""
        return self.spec_accepted / self.spec_drafted if self.spec_drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Drafted tokens accepted per verification (each verification also emits one token of
        the target's own: the correction, or the bonus when all were accepted)."""
        return self.spec_accepted / self.spec_verifications if self.spec_verifications else 0.0


@dataclass(eq=False)
class _Request:
    """Per-request generation state, hung on its Sequence's payload."""
    request_id: int
    params: SamplingParams
    max_new: int
    sampler: Any
    decoder: StreamDecoder
    stops: StopMatcher
    times: RequestTimes
    keep_logits: bool = False
    outputs: deque = field(default_factory=deque)
    finish_reason: Optional[str] = None
    sink: Optional[OutputSink] = None     # outputs go here instead of `outputs` (see submit)
    siblings: list = field(default_factory=list)   # Sequences of the same prompt parked on this one
    parked_on: Optional[Sequence] = None  # the sibling whose prompt this one waits for
    speculate: bool = False               # the engine's proposer drafts tokens for it
    matcher: Any = None                   # llguidance matcher of a constrained request (params.constraint)


# Embedding tokens a step that runs generation carries: a few rows more in each decode step.
EMBED_SHARE = 8


class Engine:
    """Continuous batching over one `_core.Model` and its paged KV cache.

    Args:
        model: the `_core.Model` (its KV cache has `kv_blocks` blocks of `kv_block_size`).
        tokenizer: turns output tokens into text (stop strings need it) and knows the EOG ids.
        n_ctx: longest sequence (prompt + generated tokens) a request may reach.
        max_batch_tokens: token budget of one forward call (chunked prefill beyond it).
        max_running: most sequences decoding at once.
        proposer: speculative decoding (`localllm.engine.speculative`): drafts tokens for the requests
            submitted with speculate (the default when there is a proposer).
        overlap_masks: compute the grammar masks of constrained requests on a helper thread
            while the forward runs (right when the forward leaves a CPU free: a GPU forward, or
            fewer threads than CPUs), else before the forward (see `Constraints`).
    """

    def __init__(self, model, tokenizer, n_ctx: int, max_batch_tokens: int = 512, max_running: int = 16,
                 proposer=None, overlap_masks: bool = True):
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
        self.model = model
        self.tokenizer = tokenizer
        self.n_ctx = n_ctx
        self.n_vocab: int = model.hparams["n_vocab"]
        self._logits_buf = np.empty((0, self.n_vocab), np.float32)   # see _logits_out
        self.pool = BlockPool(model.kv_blocks, model.kv_block_size)
        self.scheduler = Scheduler(self.pool, max_batch_tokens, max(1, min(max_running, max_batch_tokens)),
                                   model.copy_block)
        self.stats = EngineStats()
        self.lock = threading.RLock()             # guards the scheduler, the pool, the model
        # Submitted requests and aborts wait here for the next step; submit and abort never
        # wait for a forward. The step loop sleeps on this condition when there is no work.
        self._inbox_cond = threading.Condition(threading.Lock())
        self._inbox: list[Sequence] = []
        self._pending_aborts: list[int] = []
        # id -> Sequence of every request not yet drained: added by submit (inbox lock), removed
        # under the step lock once its last output was taken; one dict operation at a time.
        self._seqs: dict[int, Sequence] = {}
        self._next_id = 0                         # ids are issued in submission order
        self._eog = frozenset(tokenizer.eot_ids)
        self._stepping_thread: Optional[int] = None   # set while a step runs
        self._loop_thread: Optional[threading.Thread] = None
        self._stopping = False
        self.proposer = proposer
        self.constraints = Constraints(tokenizer, self.n_vocab, overlap=overlap_masks)
        # Embedding jobs ride in the steps (embedding_jobs.py): while generation runs they add
        # at most EMBED_SHARE tokens to a step (docs/embeddings.md has the measured trade).
        self.embeddings = EmbeddingQueue(self.pool, share=EMBED_SHARE, chunked=not model.bidirectional)

    # ---- requests ----
    def check_request(self, prompt_ids: Seq[int], max_tokens: int) -> None:
        """Raise ValueError for a request that can never run (bad ids, or too long to fit)."""
        if len(prompt_ids) == 0:
            raise ValueError("the prompt is empty (no tokens)")
        not_int = [t for t in prompt_ids if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer))]
        if not_int:
            raise TypeError(f"token ids must be ints, got {not_int[:5]}")
        bad = [t for t in prompt_ids if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.n_vocab}): {bad[:5]}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        total = len(prompt_ids) + max_tokens
        if total > self.n_ctx:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) = {total} "
                             f"exceeds the context (n_ctx={self.n_ctx})")
        # The last generated token is never fed back, so total - 1 positions need a slot.
        blocks = -(-(total - 1) // self.pool.block_size)
        if blocks > self.pool.capacity:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) needs "
                             f"{blocks} KV blocks, the pool has {self.pool.capacity} "
                             f"({self.pool.capacity * self.pool.block_size} tokens): raise kv_blocks")

    def submit(self, prompt_ids: Seq[int], params: SamplingParams, keep_logits: bool = False,
               sink: Optional[OutputSink] = None, speculate: Optional[bool] = None) -> int:
        """Queue a request; returns its id. Raises ValueError if it can never fit. Never waits
        for a step: the request joins the scheduler at the next one.

        keep_logits: each output carries a copy of the logits row its token was sampled from.
        sink: called with each output (from the stepping thread) instead of queueing it for
            `next_output`; after the finished one the request is forgotten.
        speculate: draft tokens for it with the engine's proposer (default: when there is one).
        """
        return self.submit_group(prompt_ids, [params], keep_logits, [sink], speculate)[0]

    def submit_group(self, prompt_ids: Seq[int], params: Seq[SamplingParams], keep_logits: bool = False,
                     sinks: Optional[Seq[Optional[OutputSink]]] = None,
                     speculate: Optional[bool] = None) -> list[int]:
        """Several continuations of one prompt (OpenAI's `n`), one request each; returns their
        ids. The first computes the prompt; the others wait until it has, then take its full
        blocks from the prefix cache (shared, not recomputed)."""
        if not params:
            raise ValueError("submit_group needs at least one SamplingParams")
        sinks = list(sinks) if sinks is not None else [None] * len(params)
        if len(sinks) != len(params):
            raise ValueError(f"{len(params)} params but {len(sinks)} sinks")
        if speculate and self.proposer is None:
            raise ValueError("speculate=True needs an engine with a proposer (a draft model or n-gram lookup)")
        speculate = self.proposer is not None if speculate is None else bool(speculate)
        for p in params:
            self.check_request(prompt_ids, p.max_tokens)
        prompt_ids = [int(t) for t in prompt_ids]
        # One matcher per continuation (each follows its own tokens); built before anything is
        # queued, so a grammar llguidance cannot compile fails the submit with a ValueError.
        matchers = [None if p.constraint is None else self.constraints.matcher(p.constraint) for p in params]
        samplers = []
        for p in params:
            sampler = make_sampler(p, self.n_vocab)
            for t in prompt_ids:
                sampler.accept(t)
            samplers.append(sampler)
        # Stop-string automata are built here, outside the inbox lock the step loop also takes.
        stop_matchers = [StopMatcher(p.stop or []) for p in params]
        now = time.perf_counter()
        with self._inbox_cond:
            first: Optional[Sequence] = None
            for p, sampler, sink, stops, matcher in zip(params, samplers, sinks, stop_matchers, matchers):
                rid = self._next_id
                self._next_id += 1
                req = _Request(rid, p, p.max_tokens, sampler, StreamDecoder(self.tokenizer),
                               stops, RequestTimes(submitted=now), keep_logits, sink=sink,
                               speculate=speculate, matcher=matcher)
                seq = Sequence(rid, list(prompt_ids), len(prompt_ids), BlockTable(self.pool), arrival=rid,
                               payload=req)
                self._seqs[rid] = seq
                if first is None:
                    first = seq
                    self._inbox.append(seq)
                else:
                    req.parked_on = first
                    first.payload.siblings.append(seq)
            self._inbox_cond.notify()
            return list(range(first.seq_id, first.seq_id + len(params)))

    def abort(self, request_id: int, wait: bool = True) -> bool:
        """Stop a request and free its KV blocks; False when it had already finished.

        wait=True frees them before returning (waiting for an in-flight step, at most one
        forward). wait=False never waits: when a step is running the abort is carried out as
        soon as it ends (True is returned then). Called from inside a step of the same thread
        (a finalizer run by the garbage collector mid-step), the abort is likewise deferred.
        """
        if wait and self._stepping_thread != threading.get_ident():
            with self.lock:
                return self._abort_now(request_id)
        if self._stepping_thread != threading.get_ident() and self.lock.acquire(blocking=False):
            try:
                return self._abort_now(request_id)
            finally:
                self.lock.release()
        with self._inbox_cond:
            self._pending_aborts.append(request_id)
            self._inbox_cond.notify()
        return True

    def _abort_now(self, request_id: int) -> bool:
        with self.lock:
            self._drain_inbox()
            seq = self._seqs.get(request_id)
            if seq is None or seq.payload.finish_reason is not None:
                return False
            req: _Request = seq.payload
            self._remove(seq)
            req.finish_reason = "abort"
            req.times.finished = time.perf_counter()
            self.stats.aborted += 1
            if req.sink is not None:
                self._emit(seq, RequestOutput(request_id, [], "", finished=True, finish_reason="abort"))
            else:
                del self._seqs[request_id]
            return True

    def _remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out: out of the scheduler (its blocks released at
        once) or off its sibling's parking list; siblings parked on it go to the scheduler."""
        req: _Request = seq.payload
        if self.proposer is not None:
            self.proposer.release(seq)
        if req.parked_on is not None:
            req.parked_on.payload.siblings.remove(seq)
            req.parked_on = None
            seq.table.free()
        else:
            self.scheduler.remove(seq)
        self._release_siblings(seq)

    def _release_siblings(self, seq: Sequence) -> None:
        """Siblings parked on seq join the front of the waiting queue, in submission order: its
        prompt's full blocks are in the prefix cache now (or it ended before computing them)."""
        siblings, seq.payload.siblings = seq.payload.siblings, []
        for sib in reversed(siblings):
            sib.payload.parked_on = None
            self.scheduler.add(sib, front=True)

    def _drain_inbox(self) -> None:
        """Move submitted requests into the scheduler and carry out pending aborts (lock held)."""
        with self._inbox_cond:
            for seq in self._inbox:
                self.scheduler.add(seq)
            self._inbox.clear()
            aborts, self._pending_aborts = self._pending_aborts, []
        for rid in aborts:
            self._abort_now(rid)

    def submit_embedding(self, job: EmbeddingJob) -> None:
        """Queue sequences to embed or score; their steps run on the loop thread, or on whichever
        thread calls step (`localllm.embed` waits on job.done)."""
        self.embeddings.submit(job)
        with self._inbox_cond:
            self._inbox_cond.notify()

    def run_embedding_here(self, job: EmbeddingJob) -> bool:
        """Queue the job and, while the engine has nothing else to do, run its steps on this
        thread; False (nothing queued) when the engine is busy. A short request then skips two
        thread hand-offs (to the loop thread and back), each a wait for a core on a busy
        machine; generation that arrives meanwhile takes the rest of the job to the loop."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._drain_inbox()
            if self.scheduler.has_work or self.embeddings.pending or self._pending_aborts:
                return False
            self.embeddings.submit(job)
            while not job.done.is_set() and not (self._inbox or self.scheduler.has_work):
                try:
                    if not self.step():
                        break
                except Exception:      # the step failed its jobs (this one included): keep serving
                    log.exception("engine step failed")
        finally:
            self.lock.release()
        if not job.done.is_set():      # the loop thread runs what is left
            with self._inbox_cond:
                self._inbox_cond.notify()
        return True

    def has_unfinished(self) -> bool:
        with self.lock:
            self._drain_inbox()
            return self.scheduler.has_work

    def counts(self) -> tuple[int, int]:
        """(running, waiting) requests, read without the step lock (a moment's snapshot, for
        admission control and monitoring); waiting includes submitted ones not yet scheduled."""
        running = len(self.scheduler.running)
        return running, max(0, len(self._seqs) - running)

    def sequence(self, request_id: int) -> Optional[Sequence]:
        """The live sequence of a request (None once finished and drained, or aborted)."""
        with self.lock:
            return self._seqs.get(request_id)

    # ---- the step loop ----
    def start(self) -> None:
        """Start the step loop thread (once; later calls do nothing while it runs)."""
        with self._inbox_cond:
            if self._loop_thread is not None and self._loop_thread.is_alive():
                return
            self._stopping = False
            self._loop_thread = threading.Thread(target=self._run_loop, name="localllm-engine", daemon=True)
            self._loop_thread.start()

    @property
    def loop_running(self) -> bool:
        """Whether the step loop thread runs (else callers step the engine themselves)."""
        thread = self._loop_thread
        return thread is not None and thread.is_alive()

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop the step loop after its current step (requests stay queued)."""
        with self._inbox_cond:
            self._stopping = True
            self._inbox_cond.notify_all()
            thread = self._loop_thread
        if thread is not None:
            thread.join(timeout)

    def _run_loop(self) -> None:
        while True:
            with self._inbox_cond:
                while not (self._stopping or self._inbox or self._pending_aborts or self.scheduler.has_work
                           or self.embeddings.pending):
                    self._inbox_cond.wait()
                if self._stopping:
                    return
            try:
                progressed = self.step()
            except Exception as e:     # a failed forward: fail what it ran, keep serving
                log.exception("engine step failed")
                self._fail_all(e)
                continue
            if not progressed:         # work that cannot be scheduled yet: do not spin
                with self._inbox_cond:
                    self._inbox_cond.wait(0.01)

    def _fail_all(self, error: BaseException) -> None:
        """Finish every scheduled request with finish_reason "error" (a forward raised)."""
        with self.lock:
            for seq in list(self.scheduler.running) + list(self.scheduler.waiting):
                self._finish(seq, "error", RequestOutput(seq.seq_id, [], "", error=error), flush=False)

    # ---- consuming outputs ----
    def next_output(self, request_id: int) -> Optional[RequestOutput]:
        """The request's next output, stepping the engine until there is one; None after the
        last one was returned (or after abort)."""
        with self.lock:
            seq = self._seqs.get(request_id)
            if seq is None:
                if not 0 <= request_id < self._next_id:
                    raise ValueError(f"unknown request id {request_id}")
                return None
            req: _Request = seq.payload
            if req.sink is not None:
                raise ValueError(f"request {request_id} delivers its outputs to a sink, not next_output")
            while not req.outputs:
                if not self.step():
                    raise RuntimeError(f"engine stalled: request {request_id} cannot be scheduled")
            out = req.outputs.popleft()
            out.times = req.times
            if out.finished:
                del self._seqs[request_id]
            if out.error is not None:
                raise RuntimeError(f"request {request_id} failed: {out.error}") from out.error
            return out

    def outputs(self, request_id: int) -> Iterator[RequestOutput]:
        """Iterate a request's outputs until it finishes."""
        while (out := self.next_output(request_id)) is not None:
            yield out

    def times(self, request_id: int) -> RequestTimes:
        with self.lock:
            seq = self._seqs.get(request_id)
            if seq is None:
                raise ValueError(f"request {request_id} is finished and drained (or unknown)")
            return seq.payload.times

    # ---- one step ----
    def step(self) -> bool:
        """Run one batch; False when there was nothing to run."""
        with self.lock:
            self._stepping_thread = threading.get_ident()
            try:
                return self._step()
            finally:
                self._stepping_thread = None
                self._drain_inbox()          # aborts asked for during the step happen now

    def _step(self) -> bool:
        with self.lock:
            self._drain_inbox()
            self._propose()
            schedule = self.scheduler.schedule()
            self.stats.preemptions += len(schedule.preempted)
            extra = self.embeddings.take(self.scheduler.max_batch_tokens - schedule.n_tokens, bool(schedule.chunks))
            if not schedule.chunks:
                if extra is not None:
                    self._embedding_step(extra)
                return extra is not None
            tokens, positions, seq_of_token, tables, rows = self._batch_arrays(schedule)
            pending = self._start_masks(schedule, len(rows))     # computed while the forward runs
            if extra is None:
                logits = self.model.forward(tokens, positions, seq_of_token, tables, rows,
                                            self._logits_out(len(rows)))             # [n_rows, n_vocab]
            else:
                logits = self._mixed_step(extra, tokens, positions, seq_of_token, tables, rows)
            masks = pending.wait() if pending is not None else None                  # [n_rows, words]
            self.scheduler.commit(schedule)
            self._count(schedule, len(tokens))
            self._prefill_drafts(schedule)
            first, plain = 0, []          # plain: (sequence, logits row) of chunks drawing one token
            for c in schedule.chunks:
                if not c.wants_logits:
                    continue
                seq, n_rows = c.seq, 1 + c.n_draft
                if c.n_draft:
                    allowed = masks[first:first + n_rows] if seq.payload.matcher is not None else None
                    self._guarded(seq, self._on_draft_logits, seq, logits[first:first + n_rows],
                                  seq.draft[:c.n_draft], allowed)
                else:
                    plain.append((seq, first))
                first += n_rows
            self._sample_rows(plain, logits, masks)
            return True

    def _embedding_step(self, extra: EmbeddingBatch) -> None:
        """A step of embeddings alone (token types for cross-encoder pairs)."""
        try:
            tokens, positions, seq_of, tables, types, hidden_rows = extra.arrays(0, 0)
            hidden = self.model.forward_hidden(tokens, positions, seq_of, padded_tables(tables), hidden_rows, types)
        except Exception as e:
            extra.fail(e)
            raise
        extra.finish(hidden)

    def _mixed_step(self, extra: EmbeddingBatch, tokens, positions, seq_of_token, tables, rows) -> np.ndarray:
        """One forward for the step's generation and the embedding sequences appended to it."""
        try:
            e_tokens, e_pos, e_seq, e_tables, _, hidden_rows = extra.arrays(len(tables), len(tokens))
            emb_tables = padded_tables(e_tables)
            both = np.full((len(tables) + len(e_tables), max(tables.shape[1], emb_tables.shape[1])), NULL_BLOCK,
                           np.int32)
            both[:len(tables), :tables.shape[1]] = tables
            both[len(tables):, :emb_tables.shape[1]] = emb_tables
            logits, hidden = self.model.forward_mixed(
                np.concatenate([tokens, e_tokens]), np.concatenate([positions, e_pos]),
                np.concatenate([seq_of_token, e_seq]), both, rows, hidden_rows)
        except Exception as e:
            extra.fail(e)
            raise
        extra.finish(hidden)
        return logits

    def _start_masks(self, schedule: Schedule, n_rows: int) -> Optional[StepMasks]:
        """Start computing the token masks of the step's constrained rows (None: there are
        none); row numbering as the step's logits rows."""
        jobs, first = [], 0
        for c in schedule.chunks:
            if not c.wants_logits:
                continue
            matcher = c.seq.payload.matcher
            if matcher is not None:
                jobs.append((matcher, first, list(c.seq.draft[:c.n_draft])))
            first += 1 + c.n_draft
        return self.constraints.start(jobs, n_rows) if jobs else None

    def _guarded(self, seq: Sequence, fn, *args) -> None:
        """fn(*args); an exception (e.g. NaN logits) fails this request only, the others go on."""
        try:
            fn(*args)
        except Exception as e:
            self._finish(seq, "error", RequestOutput(seq.seq_id, [], "", error=e), flush=False)

    def _sample_rows(self, plain: list[tuple[Sequence, int]], logits: np.ndarray,
                     masks: Optional[np.ndarray]) -> None:
        """Draw (and accept) the next token of every plain row in one call on the model's threads
        (one GIL hand-over per step instead of one per sequence; a 262k-vocabulary draw takes
        about 0.1 ms), constrained rows under their masks, then emit them in the batch's order."""
        if not plain:
            return
        mask_rows = [] if masks is None else [row if seq.payload.matcher is not None else -1 for seq, row in plain]
        tokens, errors = self.model.sample_rows([seq.payload.sampler for seq, _ in plain], logits,
                                                [row for _, row in plain], masks=masks, mask_rows=mask_rows)
        for (seq, row), tok, error in zip(plain, tokens, errors):
            if error is not None:
                self._finish(seq, "error", RequestOutput(seq.seq_id, [], "", error=RuntimeError(error)), flush=False)
            else:
                self._guarded(seq, self._emit_token, seq, tok, logits[row])

    def _prefill_drafts(self, schedule: Schedule) -> None:
        """Give the proposer the prompt chunks of speculating sequences this step computed,
        before their first token is sampled (a draft model prefills with the target)."""
        if self.proposer is None:
            return
        chunks = [(c.seq, c.start + c.n_tokens) for c in schedule.chunks
                  if c.n_draft == 0 and c.start < c.seq.n_prompt and c.seq.payload.speculate]
        if chunks:
            self.proposer.prefill(chunks)

    def _propose(self) -> None:
        """Let the proposer draft tokens for every speculating sequence about to decode. A
        draft never runs past the request's max_tokens: accepting all k drafted tokens emits
        k + 1 (the target's bonus token)."""
        if self.proposer is None:
            return
        seqs, limits = [], []
        for seq in self.scheduler.running:
            seq.draft = []
            req: _Request = seq.payload
            if seq.remaining == 1 and req.speculate:
                limit = req.max_new - seq.n_generated - 1
                if limit > 0:
                    seqs.append(seq)
                    limits.append(limit)
        if seqs:
            self.proposer.propose(seqs, limits)

    def _logits_out(self, n_rows: int) -> np.ndarray:
        """A reused [n_rows, n_vocab] buffer for the step's logits: rows are sampled from (or
        copied, keep_logits) before the next step, and a fresh array each step would cost a
        page-fault and clearing pass over it (16 MB for 16 rows of a 262k vocabulary)."""
        if self._logits_buf.shape[0] < n_rows:
            self._logits_buf = np.empty((n_rows, self.n_vocab), np.float32)
        return self._logits_buf[:n_rows]

    def _batch_arrays(self, schedule: Schedule):
        """The flat arrays of one forward call; each sequence's tokens are contiguous."""
        chunks = schedule.chunks
        n = [c.n_tokens for c in chunks]
        tokens = np.fromiter(itertools.chain.from_iterable(
            c.seq.tokens[c.start:c.start + c.n_tokens - c.n_draft] + c.seq.draft[:c.n_draft]
            for c in chunks), np.int32, sum(n))                                                 # [T]
        positions = np.concatenate([np.arange(c.start, c.start + c.n_tokens, dtype=np.int32) for c in chunks])
        seq_of_token = np.repeat(np.arange(len(chunks), dtype=np.int32), n)                     # [T]
        width = max(len(c.seq.table.blocks) for c in chunks)
        tables = np.full((len(chunks), width), NULL_BLOCK, np.int32)                            # [S, width]
        for i, c in enumerate(chunks):
            tables[i, :len(c.seq.table.blocks)] = c.seq.table.blocks
        ends = np.cumsum(n) - 1
        # Every row of a drafted chunk: row i predicts the token after its i-th drafted one.
        rows = np.asarray([r for i, c in enumerate(chunks) if c.wants_logits
                           for r in range(ends[i] - c.n_draft, ends[i] + 1)], np.int32)          # [n_out]
        return tokens, positions, seq_of_token, tables, rows

    def _count(self, schedule: Schedule, n_tokens: int) -> None:
        s = self.stats
        s.steps += 1
        s.tokens_computed += n_tokens
        s.decode_tokens += sum(1 for c in schedule.chunks if c.n_tokens - c.n_draft == 1 and c.start >= c.seq.n_prompt)
        s.max_batch_tokens_seen = max(s.max_batch_tokens_seen, n_tokens)
        s.max_running_seen = max(s.max_running_seen, len(self.scheduler.running))

    def _on_draft_logits(self, seq: Sequence, logits: np.ndarray, draft: list[int],
                         allowed: Optional[np.ndarray] = None) -> None:
        """Verify a draft: logits [k + 1, n_vocab], row i from the sequence's last token plus
        draft[:i]. Each row is sampled exactly as plain decoding samples it (same sampler, same
        penalty history so far), so greedy output is plain decoding's token for token; with
        temperature the rejection rule keeps the distribution (`_core.Sampler.verify`). Stops
        at the first rejected token (emitting the target's own) or after the bonus row."""
        req: _Request = seq.payload
        sampler, greedy = req.sampler, req.params.temperature <= 0.0
        n_accepted = 0
        for i, row in enumerate(logits):
            mask = None if allowed is None else allowed[i]    # the grammar after draft[:i]
            if i == len(draft):                      # all accepted: the bonus token
                tok, ok = int(sampler.sample(row, mask)), False
            elif greedy:
                tok = int(sampler.sample(row, mask))
                ok = tok == draft[i]
            else:
                tok, ok = sampler.verify(row, draft[i], allowed=mask)
            sampler.accept(tok)
            n_accepted += ok
            if not self._emit_token(seq, tok, row) or not ok:
                break
        s = self.stats
        s.spec_verifications += 1
        s.spec_drafted += len(draft)
        s.spec_accepted += n_accepted
        req.times.drafted += len(draft)
        req.times.accepted += n_accepted
        if req.finish_reason is None:
            self.scheduler.accept_draft(seq, n_accepted)

    def _emit_token(self, seq: Sequence, tok: int, logits: np.ndarray) -> bool:
        """Append a sampled token and emit it; False when it finished the request."""
        req: _Request = seq.payload
        now = time.perf_counter()
        if req.times.first_token is None:
            req.times.first_token = now
        if req.siblings:           # its prompt is computed and cached: they can share it now
            self._release_siblings(seq)
        kept = logits.copy() if req.keep_logits else None
        if req.matcher is not None and not req.matcher.consume_token(tok):
            raise RuntimeError(f"token {tok} broke the grammar: {req.matcher.get_error()}")
        if tok in self._eog and not req.params.ignore_eos:
            self._finish(seq, "stop", RequestOutput(req.request_id, [], "", logits=kept, created=now))
            return False
        seq.tokens.append(tok)
        out = RequestOutput(req.request_id, [tok], "", logits=kept, created=now)
        if req.params.logprobs is not None:
            lp, top = req.sampler.last_logprobs()
            out.logprobs.append({"token": tok, "logprob": float(lp),
                                 "top": [(int(i), float(p)) for i, p in top]})
        out.text, stopped = req.stops.feed(req.decoder.feed(tok))
        if stopped:
            self._finish(seq, "stop", out, flush=False)
        elif req.matcher is not None and req.matcher.is_stopped():
            # The grammar admits nothing more (only an end token): complete, stop now rather
            # than spend a step on the end token.
            self._finish(seq, "stop", out)
        elif seq.n_generated >= req.max_new:
            self._finish(seq, "length", out)
        else:
            self._emit(seq, out)
            return True
        return False

    def _emit(self, seq: Sequence, out: RequestOutput) -> None:
        """Hand an output to its consumer: the request's sink, or its queue for next_output."""
        req: _Request = seq.payload
        out.times = req.times
        if req.sink is None:
            req.outputs.append(out)
            return
        if out.finished:
            self._seqs.pop(req.request_id, None)
        try:
            req.sink(out)
        except Exception:          # a consumer's fault must not stop the step
            log.exception("output sink of request %d failed", req.request_id)

    def _finish(self, seq: Sequence, reason: str, out: RequestOutput, flush: bool = True) -> None:
        req: _Request = seq.payload
        if flush:   # text held back (incomplete UTF-8, a possible stop-string start) is final now
            tail, _ = req.stops.feed(req.decoder.flush())
            out.text += tail + req.stops.flush()
        out.finished, out.finish_reason = True, reason
        req.finish_reason = reason
        req.times.finished = out.created = time.perf_counter()
        self._remove(seq)          # blocks released before the consumer hears it finished
        self.stats.finished += 1
        self._emit(seq, out)

    # ---- introspection ----
    def pool_state(self) -> dict:
        """Block pool usage and prefix-cache counters, for monitoring and tests."""
        with self.lock:
            p, c = self.pool, self.pool.stats
            block_bytes = self.model.kv_bytes // self.model.kv_blocks
            return {"blocks": p.capacity, "used": p.num_used, "free": p.num_free, "cached": p.num_cached,
                    "evictable": p.num_evictable, "peak_used": p.peak_used, "block_bytes": block_bytes,
                    "peak_kv_bytes": p.peak_used * block_bytes, "query_blocks": c.query_blocks,
                    "hit_blocks": c.hit_blocks, "query_tokens": c.query_tokens, "hit_tokens": c.hit_tokens,
                    "evictions": c.evictions, "running": len(self.scheduler.running),
                    "waiting": len(self.scheduler.waiting) + len(self._inbox)}
