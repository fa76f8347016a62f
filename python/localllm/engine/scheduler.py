"""Continuous-batching scheduler: which tokens of which sequences go into the next forward call.

Pure policy over the block manager (no model, no sampling), so its decisions can be tested on
their own. Every step builds one batch under a token budget:

1. decode tokens of running sequences (one each) first, so streams never stall behind a prompt;
2. then the next chunk of running sequences still in their prompt (chunked prefill);
3. then new sequences from the waiting queue, first come first served, while fewer than
   ``max_running`` run, budget remains and their blocks fit without preempting anyone.

When a running sequence needs a block and the pool is dry, the newest running sequence is
preempted: its blocks are released and it goes back to the front of the waiting queue, to be
recomputed from its tokens (prompt + output so far) later; its full blocks stay in the prefix
cache, so the recomputation is often mostly cache hits. The oldest running sequence is never
preempted for a younger one, so it always progresses: no deadlock as long as every sequence fits
in the pool on its own (checked when it is submitted).
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from .kv_blocks import BlockKey, BlockPool, BlockTable, OutOfBlocks, prefix_keys, reusable_blocks

__all__ = ["Chunk", "Schedule", "Scheduler", "SeqState", "Sequence"]


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One request's tokens and KV bookkeeping. ``tokens[:num_computed]`` have their K/V in the
    cache; the rest are fed to the model by the coming steps."""

    seq_id: int
    tokens: list[int]
    n_prompt: int
    table: BlockTable
    arrival: int                                 # submission order: lower is older
    num_computed: int = 0
    keys: list[BlockKey] = field(default_factory=list)   # prefix keys of the full blocks of tokens
    state: SeqState = SeqState.WAITING
    n_preemptions: int = 0
    num_cached_tokens: int = 0                   # prompt tokens found in the prefix cache at admission
    payload: Any = None                          # the engine's per-request state
    draft: list[int] = field(default_factory=list)   # tokens proposed to follow tokens (speculative decoding)
    spec_state: Any = None                       # the proposer's per-sequence state

    @property
    def remaining(self) -> int:
        """Tokens not yet fed to the model."""
        return len(self.tokens) - self.num_computed

    @property
    def n_generated(self) -> int:
        return len(self.tokens) - self.n_prompt


@dataclass
class Chunk:
    """Tokens [start, start + n_tokens) of one sequence, fed in this step."""

    seq: Sequence
    start: int
    n_tokens: int
    wants_logits: bool      # it reaches the sequence's last token: the next one is sampled from it
    n_draft: int = 0        # the last n_draft tokens are seq.draft[:n_draft], to be verified (logits for each)


@dataclass
class Schedule:
    chunks: list[Chunk] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(c.n_tokens for c in self.chunks)


class Scheduler:
    """FCFS continuous batching with chunked prefill, prefix reuse and preemption by recompute.

    Args:
        pool: the block pool the sequences' tables draw from.
        max_batch_tokens: token budget of one forward call.
        max_running: most sequences running (holding blocks) at once.
        copy_block: copies a block's KV contents (copy-on-write before writing a shared block).
    """

    def __init__(self, pool: BlockPool, max_batch_tokens: int, max_running: int,
                 copy_block: Callable[[int, int], None]):
        if max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {max_running}")
        if max_batch_tokens < max_running:
            raise ValueError(f"max_batch_tokens ({max_batch_tokens}) must be >= max_running "
                             f"({max_running}) so every running sequence decodes each step")
        self.pool = pool
        self.max_batch_tokens = max_batch_tokens
        self.max_running = max_running
        self.copy_block = copy_block
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.n_preemptions = 0

    def add(self, seq: Sequence, front: bool = False) -> None:
        """Queue a sequence for admission: at the back, or at the front (ahead of later arrivals)."""
        seq.state = SeqState.WAITING
        if front:
            self.waiting.appendleft(seq)
        else:
            self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out (finished or aborted) and release its blocks at once."""
        if seq.state is SeqState.RUNNING:
            self.running.remove(seq)
        elif seq.state is SeqState.WAITING:
            self.waiting.remove(seq)
        seq.table.free()
        seq.state = SeqState.FINISHED

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step ----
    def schedule(self) -> Schedule:
        """Decide the next batch; blocks for every scheduled token are in place on return."""
        out = Schedule()
        planned: dict[Sequence, int] = {}          # seq -> tokens this step, insertion ordered
        budget = self.max_batch_tokens
        decoding = [s for s in self.running if s.remaining == 1]
        prefilling = [s for s in self.running if s.remaining > 1]
        spare = budget - len(decoding)             # what drafts may take: every decode keeps its token
        for seq in decoding + prefilling:
            if seq.state is not SeqState.RUNNING:  # preempted earlier in this step
                continue
            if budget == 0:
                break
            n = min(seq.remaining, budget)
            if n == 0:                             # nothing to feed (its token was not appended)
                continue
            if seq.remaining == 1 and seq.draft:
                n_draft = self._reserve_draft(seq, min(len(seq.draft), max(0, spare)))
                spare -= n_draft
                n += n_draft
            budget += self._reserve_or_preempt(seq, n, planned, out)
            if seq.state is SeqState.RUNNING:
                planned[seq] = n
                budget -= n
        if not out.preempted:      # the pool is dry: let the running ones finish first
            self._admit(planned, budget, out)
        out.chunks = [Chunk(s, s.num_computed, n, s.num_computed + n >= len(s.tokens),
                            max(0, s.num_computed + n - len(s.tokens)))
                      for s, n in planned.items()]
        return out

    def _reserve_draft(self, seq: Sequence, n_draft: int) -> int:
        """Blocks for a decoding sequence's token plus n_draft drafted ones; a draft the pool
        cannot hold without preempting is dropped (speculation never preempts anyone).
        Returns the drafted tokens kept (seq.draft is cut to them)."""
        if n_draft:
            try:
                seq.table.prepare_write(seq.num_computed, seq.num_computed + 1 + n_draft, self.copy_block)
            except OutOfBlocks:
                n_draft = 0
        del seq.draft[n_draft:]
        return n_draft

    def _reserve_or_preempt(self, seq: Sequence, n: int, planned: dict[Sequence, int],
                            out: Schedule) -> int:
        """Blocks for seq's next n tokens, preempting the newest running sequences as needed
        (seq itself last). Returns the budget freed by unscheduling preempted sequences."""
        freed = 0
        while True:
            try:
                seq.table.prepare_write(seq.num_computed, seq.num_computed + n, self.copy_block)
                return freed
            except OutOfBlocks:
                victim = max(self.running, key=lambda s: s.arrival)
                freed += planned.pop(victim, 0)
                self._preempt(victim, out)
                if victim is seq:
                    return freed

    def _preempt(self, seq: Sequence, out: Schedule) -> None:
        self.running.remove(seq)
        seq.table.free()
        seq.draft.clear()
        seq.num_computed = 0
        seq.state = SeqState.WAITING
        seq.n_preemptions += 1
        self.n_preemptions += 1
        # Older preempted sequences end up in front of newer ones (victims go newest first).
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    def _admit(self, planned: dict[Sequence, int], budget: int, out: Schedule) -> None:
        """Admit waiting sequences in order while they fit; never preempt for admission."""
        bs = self.pool.block_size
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            seq = self.waiting[0]
            prefix_keys(seq.tokens, bs, seq.keys)
            eligible = reusable_blocks(len(seq.tokens), bs)
            hits = seq.table.match_prefix(seq.keys, seq.tokens, eligible)
            seq.num_computed = hits * bs
            n = min(seq.remaining, budget)
            try:
                seq.table.prepare_write(seq.num_computed, seq.num_computed + n, self.copy_block)
            except OutOfBlocks:
                seq.table.free()
                seq.num_computed = 0
                break
            self.pool.record_lookup(eligible, hits)
            if seq.n_preemptions == 0:
                seq.num_cached_tokens = hits * bs
            self.waiting.popleft()
            seq.state = SeqState.RUNNING
            self.running.append(seq)
            planned[seq] = n
            budget -= n
            out.admitted.append(seq)

    def commit(self, schedule: Schedule) -> None:
        """After the forward call: the scheduled tokens are computed; cache their full blocks."""
        bs = self.pool.block_size
        for chunk in schedule.chunks:
            seq = chunk.seq
            # Drafted tokens are not the sequence's (yet): accept_draft counts those verified.
            seq.num_computed = chunk.start + chunk.n_tokens - chunk.n_draft
            prefix_keys(seq.tokens, bs, seq.keys)
            seq.table.register_full_blocks(seq.keys, seq.tokens, seq.num_computed)

    def accept_draft(self, seq: Sequence, n_accepted: int) -> None:
        """After verification: the first n_accepted drafted tokens (now appended to seq.tokens)
        keep the K/V the forward wrote for them; the rejected ones' K/V is dropped by cutting
        the block table back to the positions computed (their blocks return to the pool)."""
        seq.num_computed += n_accepted
        if seq.num_computed >= len(seq.tokens):
            raise ValueError(f"accept_draft: {n_accepted} accepted tokens leave no token to feed "
                             f"(num_computed {seq.num_computed}, {len(seq.tokens)} tokens)")
        seq.draft.clear()
        seq.table.truncate(seq.num_computed)
        prefix_keys(seq.tokens, self.pool.block_size, seq.keys)
        seq.table.register_full_blocks(seq.keys, seq.tokens, seq.num_computed)
