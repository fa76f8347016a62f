"""Embedding work in the engine's steps: sequences (texts to embed, query-document pairs to
score) that ride in the same forward as the generation a step runs.

`EmbeddingQueue.take` fills what a step leaves of its token budget, oldest job first. While
generation runs, embeddings take at most `share` tokens of a step, so a decode step grows by a
few rows instead of waiting behind a whole batch of embeddings; without generation they take the
whole budget. A causal model's sequence may be split across steps (chunked like a prompt: its KV
blocks stay between its chunks, each chunk attends to the earlier ones); a bidirectional model's
goes whole into one forward (a sequence longer than the budget then runs alone). `EmbeddingBatch`
builds the rows the forward appends and pools the hidden states it returns into each job: the mean
over all of a sequence's rows (summed in float64 across its chunks), or its first or last row.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .kv_blocks import NULL_BLOCK, BlockPool, BlockTable

__all__ = ["EmbeddingJob", "EmbeddingBatch", "EmbeddingQueue", "padded_tables"]


@dataclass
class EmbeddingJob:
    """Sequences to run and pool; `out` [n, n_embd] is complete once `done` is set, when
    `on_done` (if given) is called too, on the thread that ran the step: an asyncio waiter's
    wake-up (engine/aio.py), which must not raise."""
    seqs: list[list[int]]
    pooling: str                              # mean, cls, last (rank pools the first row)
    out: np.ndarray
    types: Optional[list[list[int]]] = None   # token types (cross-encoder pairs)
    next: int = 0                             # the sequence being scheduled ...
    pos: int = 0                              # ... and its first token not yet scheduled
    table: Optional[BlockTable] = None        # its KV blocks while it is split across steps
    finished: int = 0
    error: Optional[BaseException] = None
    done: threading.Event = field(default_factory=threading.Event)
    sums: Optional[np.ndarray] = None         # mean pooling's running sums (float64)
    on_done: Optional[Callable[[], None]] = None

    def complete(self) -> None:
        self.done.set()
        if self.on_done is not None:
            self.on_done()


@dataclass
class _Chunk:
    job: EmbeddingJob
    index: int                                # which sequence of the job
    start: int                                # its first token in this step
    n: int
    table: BlockTable

    @property
    def last(self) -> bool:
        return self.start + self.n == len(self.job.seqs[self.index])

    def rows(self, first: int) -> list[int]:
        """The rows pooling needs from this chunk, as batch rows from `first`."""
        pooling = self.job.pooling
        if pooling == "mean":
            return list(range(first, first + self.n))
        if pooling == "last":
            return [first + self.n - 1] if self.last else []
        return [first] if self.start == 0 else []


class EmbeddingBatch:
    """The chunks one step runs."""

    def __init__(self, chunks: list[_Chunk]):
        self.chunks = chunks

    def arrays(self, first_seq: int, first_row: int):
        """(tokens, positions, seq_of_token, table rows, token types or None, hidden rows) of the
        batch's chunks, numbered from sequence first_seq and token row first_row."""
        cs = self.chunks
        tokens = np.concatenate([np.asarray(c.job.seqs[c.index][c.start:c.start + c.n], np.int32) for c in cs])
        positions = np.concatenate([np.arange(c.start, c.start + c.n, dtype=np.int32) for c in cs])
        seq_of = np.repeat(np.arange(first_seq, first_seq + len(cs), dtype=np.int32), [c.n for c in cs])
        types = None
        if any(c.job.types is not None for c in cs):
            types = np.concatenate([np.asarray(c.job.types[c.index][c.start:c.start + c.n]
                                               if c.job.types is not None else [0] * c.n, np.int32) for c in cs])
        starts = first_row + np.cumsum([0] + [c.n for c in cs[:-1]])
        rows = [r for c, s in zip(cs, starts) for r in c.rows(int(s))]
        return tokens, positions, seq_of, [c.table.blocks for c in cs], types, np.asarray(rows, np.int32)

    def finish(self, hidden: np.ndarray) -> None:
        """Pool the hidden rows (in `arrays`' order) into the jobs; free finished sequences' KV."""
        at = 0
        for c in self.chunks:
            job, n_rows = c.job, len(c.rows(0))
            got = hidden[at:at + n_rows]
            at += n_rows
            if job.pooling == "mean":
                job.sums[c.index] += got.sum(axis=0, dtype=np.float64)
                if c.last:
                    job.out[c.index] = job.sums[c.index] / len(job.seqs[c.index])
            elif n_rows:
                job.out[c.index] = got[0]
            if c.last:
                c.table.free()
                job.finished += 1
                if job.finished == len(job.seqs):
                    job.complete()

    def fail(self, error: BaseException) -> None:
        for c in self.chunks:
            c.table.free()
            if c.job.table is c.table:
                c.job.table = None
            c.job.error = error
            c.job.complete()


class EmbeddingQueue:
    """Jobs waiting for steps. submit from any thread; take and the batches under the step lock."""

    def __init__(self, pool: BlockPool, share: int, chunked: bool):
        self._pool = pool
        self.share = share
        self.chunked = chunked                # a causal model: sequences may span steps
        self._jobs: deque[EmbeddingJob] = deque()
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return bool(self._jobs)

    def submit(self, job: EmbeddingJob) -> None:
        if job.pooling == "mean":
            job.sums = np.zeros(job.out.shape, np.float64)
        with self._lock:
            self._jobs.append(job)

    def take(self, budget: int, generating: bool) -> Optional[EmbeddingBatch]:
        """This step's chunks (None when nothing waits or nothing fits the pool now)."""
        cap = min(budget, self.share) if generating else budget
        chunks: list[_Chunk] = []
        used = 0
        with self._lock:
            while self._jobs and used < cap:
                job = self._jobs[0]
                if job.error is not None:     # cancelled: its chunks in flight finish, no more start
                    self._jobs.popleft()
                    continue
                seq, start = job.seqs[job.next], job.pos
                n = min(len(seq) - start, cap - used) if self.chunked else len(seq)
                if chunks and used + n > cap:
                    break
                table = job.table or BlockTable(self._pool)
                if -(-(start + n) // self._pool.block_size) - len(table.blocks) > self._pool.num_free:
                    break
                table.ensure(start + n)
                chunks.append(_Chunk(job, job.next, start, n, table))
                used += n
                if start + n < len(seq):      # the rest in a later step, after this chunk's KV
                    job.pos, job.table = start + n, table
                    break
                job.next, job.pos, job.table = job.next + 1, 0, None
                if job.next == len(job.seqs):
                    self._jobs.popleft()
        return EmbeddingBatch(chunks) if chunks else None

    def cancel(self, job: EmbeddingJob, error: BaseException) -> None:
        """Start no more of a job's sequences (its caller gave up); free a split one's blocks."""
        with self._lock:
            job.error = error
            if job.table is not None:
                job.table.free()
                job.table = None


def padded_tables(rows: list[list[int]]) -> np.ndarray:
    width = max(len(r) for r in rows)
    tables = np.full((len(rows), width), NULL_BLOCK, np.int32)
    for i, r in enumerate(rows):
        tables[i, :len(r)] = r
    return tables
