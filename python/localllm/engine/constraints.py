"""Constrained decoding in the engine: one llguidance matcher per constrained request, and the
token bitmasks of each step computed while the forward runs.

Per step, the rows whose logits will be sampled and that belong to constrained requests need a
mask. A mask depends only on the tokens the request has accepted (and, for a speculative draft,
on the drafted tokens before that row), all known before the forward. Where the forward leaves
a CPU free (a GPU forward, or fewer forward threads than CPUs), `Constraints.start` hands them
to llguidance's executor on a helper thread (llguidance releases the GIL, and so does the
forward), and `StepMasks.wait` collects them after the forward: the mask costs the step nothing
unless it takes longer than the forward. Where the forward's threads take every CPU, the
masks are computed before the forward instead: they cost little CPU (about 0.03 ms for one
JSON-schema sequence and 0.4 ms for 16 on SmolLM2's 49k vocabulary, AVX2 EPYC), while a helper
thread waking beside a forward that spins on all cores preempts one of its workers, and every
worker then waits at the next barrier. The masks are rows of a [n_rows, ceil(n_vocab / 32)] uint32
array aligned with the step's logits rows, applied by the C++ sampler (`_core.Sampler.sample`'s
`allowed`, `Model.sample_rows`' `masks`).

Speculative decoding: a drafted chunk gets a mask for each draft position, computed by advancing
the matcher over the draft and rolling it back (llguidance's
`unsafe_compute_mask_ptr_with_draft_token`); the matcher consumes only the tokens the
verification keeps, so a rejected draft never advances it. Rows after a draft token the grammar
rejects are all zero: such a token is always rejected (its probability under the mask is 0), so
those rows are never sampled.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import llguidance
import numpy as np

from ..structured.grammar import GrammarSpec
from ..structured.tokenizer import grammar_tokenizer

__all__ = ["Constraints", "StepMasks", "new_matcher"]


def new_matcher(tokenizer: llguidance.LLTokenizer, spec: GrammarSpec) -> llguidance.LLMatcher:
    """A matcher at the grammar's start; ValueError naming the problem when llguidance cannot
    build one (a grammar that parses but cannot be compiled for this vocabulary)."""
    matcher = llguidance.LLMatcher(tokenizer, spec.grammar, log_level=0)
    if matcher.is_error():
        raise ValueError(f"the {spec.kind.replace('_', ' ')} cannot be used: {matcher.get_error()}")
    return matcher


class StepMasks:
    """The masks of one step, being computed (see the module docstring)."""

    def __init__(self, masks: np.ndarray, future: Optional[Future], owner: Constraints) -> None:
        self.masks = masks                      # [n_rows, words] uint32
        self._future = future
        self._owner = owner

    def wait(self) -> np.ndarray:
        """The masks, once computed (raises what the computation raised)."""
        if self._future is not None:
            t0 = time.perf_counter()
            self._future.result()
            self._owner.wait_seconds.append(time.perf_counter() - t0)
            self._future = None
        return self.masks


class Constraints:
    """The engine's llguidance state: the model's grammar tokenizer (built on first use, once
    per model), the executor that computes masks in parallel, and timing records.

    mask_seconds: wall time of each step's mask computation (all its constrained rows).
    wait_seconds: how long each step waited for its masks after the forward (0 when the
    computation hid behind the forward).
    """

    def __init__(self, tokenizer, n_vocab: int, n_threads: Optional[int] = None, overlap: bool = True) -> None:
        self._text_tokenizer = tokenizer
        self.overlap = overlap
        self.n_vocab = n_vocab
        self.words = (n_vocab + 31) // 32
        self._n_threads = n_threads
        self._llg_tokenizer: Optional[llguidance.LLTokenizer] = None
        self._executor: Optional[llguidance.LLExecutor] = None
        self._thread: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self._buf = np.zeros((0, self.words), np.uint32)
        self.mask_seconds: deque = deque(maxlen=65536)
        self.wait_seconds: deque = deque(maxlen=65536)

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._llg_tokenizer is None:
                self._llg_tokenizer = grammar_tokenizer(self._text_tokenizer, self.n_vocab)
            return self._llg_tokenizer

    def matcher(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        return new_matcher(self.tokenizer, spec)

    def start(self, jobs: list[tuple[llguidance.LLMatcher, int, list[int]]], n_rows: int) -> StepMasks:
        """Start computing the masks of jobs (matcher, first row, drafted tokens) into rows of a
        [n_rows, words] array: row first + i is the mask after the first i drafted tokens. With
        overlap off they are computed here, before the forward, and are ready at once."""
        if self._buf.shape[0] < n_rows:
            self._buf = np.zeros((n_rows, self.words), np.uint32)
        masks = self._buf[:n_rows]
        masks.fill(0)
        if self._executor is None:
            self._executor = llguidance.LLExecutor(self._n_threads)
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="localllm-masks")
        if not self.overlap:
            self._compute(jobs, masks)
            return StepMasks(masks, None, self)
        future = self._thread.submit(self._compute, jobs, masks)
        return StepMasks(masks, future, self)

    def _compute(self, jobs, masks: np.ndarray) -> None:
        t0 = time.perf_counter()
        plain = [(matcher, row) for matcher, row, draft in jobs if not draft]
        drafted = [job for job in jobs if job[2]]
        if plain:
            self._executor.unsafe_compute_mask_ptr(plain, masks.ctypes.data, self.words * 4, masks.shape[0])
        if drafted:
            self._executor.unsafe_compute_mask_ptr_with_draft_token(
                drafted, masks.ctypes.data, self.words * 4, masks.shape[0])
        self.mask_seconds.append(time.perf_counter() - t0)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
