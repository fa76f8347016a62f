"""Embedding work in the engine's steps: whole sequences (texts to embed, query-document pairs to
score) that ride in the same forward as the generation a step runs.

`EmbeddingQueue.take` fills what a step leaves of its token budget with whole sequences, oldest
job first, each with its own KV blocks for the one forward (freed after it). While generation
runs, embeddings take at most `share` tokens of a step (a decode step then grows by that much
rather than waiting for a whole batch of embeddings), but always at least one sequence, so
neither side waits on the other indefinitely; without generation they take the whole budget (a
sequence longer than it runs alone: a bidirectional model needs each sequence whole).
`EmbeddingBatch` builds the rows the forward appends, and pools the hidden states it returns
into each job (mean over the sequence's rows, or its first or last row).
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .kv_blocks import NULL_BLOCK, BlockPool, BlockTable

__all__ = ["EmbeddingJob", "EmbeddingBatch", "EmbeddingQueue"]


@dataclass
class EmbeddingJob:
    """Sequences to run whole and pool; `out` [n, n_embd] is complete once `done` is set."""
    seqs: list[list[int]]
    pooling: str                              # mean, cls, last (rank pools the first row)
    out: np.ndarray
    types: Optional[list[list[int]]] = None   # token types (cross-encoder pairs)
    next: int = 0                             # the next sequence to schedule
    finished: int = 0
    error: Optional[BaseException] = None
    done: threading.Event = field(default_factory=threading.Event)


class EmbeddingBatch:
    """The sequences one step runs: (job, index, KV table) each."""

    def __init__(self, entries: list[tuple[EmbeddingJob, int, BlockTable]]):
        self.entries = entries

    @property
    def lengths(self) -> list[int]:
        return [len(job.seqs[i]) for job, i, _ in self.entries]

    def arrays(self, first_seq: int, first_row: int):
        """(tokens, positions, seq_of_token, table rows, token types, hidden rows) of the batch's
        sequences, numbered from sequence first_seq and token row first_row."""
        lengths = self.lengths
        tokens = np.concatenate([np.asarray(job.seqs[i], np.int32) for job, i, _ in self.entries])
        positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
        seq_of = np.repeat(np.arange(first_seq, first_seq + len(lengths), dtype=np.int32), lengths)
        tables = [t.blocks for _, _, t in self.entries]
        types = None
        if any(job.types is not None for job, _, _ in self.entries):
            types = np.concatenate([np.asarray(job.types[i] if job.types is not None else [0] * len(job.seqs[i]),
                                               np.int32) for job, i, _ in self.entries])
        starts = first_row + np.cumsum([0] + lengths[:-1])
        rows = [np.arange(s, s + n) if job.pooling == "mean" else [s + n - 1 if job.pooling == "last" else s]
                for (job, _, _), s, n in zip(self.entries, starts, lengths)]
        return tokens, positions, seq_of, tables, types, np.concatenate(rows).astype(np.int32)

    def finish(self, hidden: np.ndarray) -> None:
        """Pool the hidden rows (in `arrays`' order) into the jobs; free the KV blocks."""
        at = 0
        for job, i, table in self.entries:
            n = len(job.seqs[i]) if job.pooling == "mean" else 1
            job.out[i] = hidden[at:at + n].mean(axis=0, dtype=np.float64) if n > 1 else hidden[at]
            at += n
            job.finished += 1
            table.free()
            if job.finished == len(job.seqs):
                job.done.set()

    def fail(self, error: BaseException) -> None:
        for job, _, table in self.entries:
            table.free()
            job.error = error
            job.done.set()


class EmbeddingQueue:
    """Jobs waiting for steps. submit from any thread; take and the batches under the step lock."""

    def __init__(self, pool: BlockPool, share: int):
        self._pool = pool
        self.share = share
        self._jobs: deque[EmbeddingJob] = deque()
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return bool(self._jobs)

    def submit(self, job: EmbeddingJob) -> None:
        with self._lock:
            self._jobs.append(job)

    def take(self, budget: int, generating: bool) -> Optional[EmbeddingBatch]:
        """Whole sequences for this step (None when none is waiting or none fits the pool now)."""
        cap = min(budget, self.share) if generating else budget
        entries: list[tuple[EmbeddingJob, int, BlockTable]] = []
        used = 0
        with self._lock:
            while self._jobs:
                job = self._jobs[0]
                if job.error is not None:
                    self._jobs.popleft()
                    continue
                n = len(job.seqs[job.next])
                blocks = -(-n // self._pool.block_size)
                if (entries and used + n > cap) or blocks > self._pool.num_free:
                    break
                table = BlockTable(self._pool)
                table.ensure(n)
                entries.append((job, job.next, table))
                used += n
                job.next += 1
                if job.next == len(job.seqs):
                    self._jobs.popleft()
        return EmbeddingBatch(entries) if entries else None

    def cancel(self, job: EmbeddingJob, error: BaseException) -> None:
        """Drop a job's unscheduled sequences (its caller gave up)."""
        with self._lock:
            job.error = error


def padded_tables(rows: list[list[int]]) -> np.ndarray:
    width = max(len(r) for r in rows)
    tables = np.full((len(rows), width), NULL_BLOCK, np.int32)
    for i, r in enumerate(rows):
        tables[i, :len(r)] = r
    return tables
