"""The scheduler's batch-building decisions, without a model: a step feeds the planned tokens,
then every sequence whose chunk reached its end gets a next token (a fixed function of the
sequence and position stands in for sampling; what is tested is who runs when, and the blocks)."""
import random

import pytest

from localllm.engine.kv_blocks import BlockPool, BlockTable
from localllm.engine.scheduler import Scheduler, SeqState, Sequence


def no_copy(src: int, dst: int) -> None:
    raise AssertionError("the scheduler never writes a shared block (only full blocks are shared)")


class Driver:
    """Runs scheduler steps the way the engine does, with generated token = 1000 + position."""

    def __init__(self, n_blocks=64, block_size=4, max_batch_tokens=16, max_running=4):
        self.pool = BlockPool(n_blocks, block_size)
        self.sched = Scheduler(self.pool, max_batch_tokens, max_running, no_copy)
        self.max_new: dict[int, int] = {}
        self.done: list[int] = []
        self.n = 0

    def add(self, prompt, max_new=3) -> Sequence:
        seq = Sequence(self.n, list(prompt), len(prompt), BlockTable(self.pool), arrival=self.n)
        self.n += 1
        self.max_new[seq.seq_id] = max_new
        self.sched.add(seq)
        return seq

    def step(self):
        out = self.sched.schedule()
        self.check_invariants(out)
        self.sched.commit(out)
        for c in out.chunks:
            if c.wants_logits:
                c.seq.tokens.append(1000 + len(c.seq.tokens))
                if c.seq.n_generated >= self.max_new[c.seq.seq_id]:
                    self.sched.remove(c.seq)
                    self.done.append(c.seq.seq_id)
        return out

    def check_invariants(self, out):
        bs = self.pool.block_size
        assert out.n_tokens <= self.sched.max_batch_tokens
        assert len(self.sched.running) <= self.sched.max_running
        seen = set()
        for c in out.chunks:
            assert c.seq.state is SeqState.RUNNING and c.seq not in seen
            seen.add(c.seq)
            assert c.start == c.seq.num_computed and 1 <= c.n_tokens <= c.seq.remaining
            assert c.seq.table.capacity >= c.start + c.n_tokens        # every slot has a block
            for i in range(c.start // bs, -(-(c.start + c.n_tokens) // bs)):
                assert self.pool.ref_counts[c.seq.table.blocks[i]] == 1  # written blocks are private
        for s in self.sched.waiting:
            assert s.table.blocks == [] and s.num_computed == 0
        refs = {}
        for s in self.sched.running:
            for b in s.table.blocks:
                refs[b] = refs.get(b, 0) + 1
        for b, n in refs.items():
            assert self.pool.ref_counts[b] == n                        # no leaked references
        assert self.pool.num_used == len(refs)


def test_decode_first_then_chunked_prefill_under_budget():
    d = Driver(max_batch_tokens=8, max_running=4)
    a = d.add([1, 2, 3], max_new=50)
    out = d.step()
    assert [(c.seq, c.start, c.n_tokens) for c in out.chunks] == [(a, 0, 3)]
    long = d.add(list(range(1, 21)), max_new=5)             # 20 prompt tokens, budget 8
    for k in range(3):
        out = d.step()
        plan = [(c.seq, c.start, c.n_tokens) for c in out.chunks]
        # a's decode token comes first every step; the prompt gets the rest of the budget
        assert plan[0] == (a, 3 + k, 1)
        assert plan[1] == (long, 7 * k, min(7, 20 - 7 * k))
        assert out.chunks[1].wants_logits == (k == 2)
    assert long.n_generated == 1 and long.num_computed == 20
    out = d.step()
    assert [(c.seq, c.n_tokens) for c in out.chunks] == [(a, 1), (long, 1)]


def test_fcfs_with_running_cap_and_join_at_next_step():
    d = Driver(max_batch_tokens=32, max_running=2)
    seqs = [d.add([i + 1] * 3, max_new=2 + i) for i in range(4)]
    out = d.step()
    assert out.admitted == seqs[:2] and [s.state for s in seqs[2:]] == [SeqState.WAITING] * 2
    out = d.step()                                         # seq 0 gets its 2nd token and finishes
    assert d.done == [0] and out.admitted == []
    out = d.step()                                         # seq 2 joins at the very next step
    assert out.admitted == [seqs[2]] and [c.seq for c in out.chunks] == [seqs[1], seqs[2]]
    while d.sched.has_work:
        d.step()
    assert sorted(d.done) == [0, 1, 2, 3]
    assert [s.n_generated for s in seqs] == [2, 3, 4, 5]
    assert d.pool.num_used == 0


def test_prefix_reuse_at_admission_keeps_the_last_token():
    d = Driver(block_size=4, max_batch_tokens=64)
    prompt = list(range(1, 13))                            # exactly 3 blocks
    first = d.add(prompt, max_new=2)
    d.step()
    first_blocks = list(first.table.blocks)
    while d.sched.has_work:
        d.step()
    assert d.pool.num_cached == 3 and d.pool.num_used == 0  # 12 prompt + 1 fed token: 3 full blocks
    again = d.add(prompt, max_new=2)
    out = d.step()
    # Blocks 0-1 are reused; block 2 holds the last prompt token, which is recomputed.
    assert again.num_cached_tokens == 8 and [(c.start, c.n_tokens) for c in out.chunks] == [(8, 4)]
    assert again.table.blocks[:2] == first_blocks[:2] and again.table.blocks[2] != first_blocks[2]
    assert (d.pool.stats.query_blocks, d.pool.stats.hit_blocks) == (2 + 2, 2)
    longer = d.add(prompt + [77, 78, 79, 80, 81], max_new=1)
    out = d.step()
    assert longer.num_cached_tokens == 12
    assert [(c.seq, c.start, c.n_tokens) for c in out.chunks][-1] == (longer, 12, 5)


def test_preemption_of_the_newest_and_recompute_of_its_tokens():
    # 6 usable blocks of 4 slots: two sequences growing to 12 positions cannot both fit.
    d = Driver(n_blocks=7, block_size=4, max_batch_tokens=32, max_running=4)
    old = d.add([1, 2, 3, 4, 5, 6, 7], max_new=10)
    new = d.add([9, 8, 7, 6, 5, 4, 3], max_new=10)
    d.step()
    assert d.pool.num_used == 4
    preempted_at = None
    for k in range(12):
        out = d.step()
        if out.preempted:
            preempted_at = k
            assert out.preempted == [new] and new.state is SeqState.WAITING
            assert d.sched.waiting[0] is new and new.table.blocks == [] and new.num_computed == 0
            assert out.admitted == []                      # no admission in a preempting step
            assert [c.seq for c in out.chunks] == [old]
            break
    assert preempted_at is not None and new.n_preemptions == 1
    tokens_then = list(new.tokens)
    readmitted = False
    while d.sched.has_work:
        out = d.step()
        if new in out.admitted:
            # The recompute covers prompt + generated tokens, minus full blocks still cached.
            (c,) = [c for c in out.chunks if c.seq is new]
            assert c.start % 4 == 0 and c.start + c.n_tokens == len(tokens_then) and c.wants_logits
            readmitted = True
    assert readmitted
    assert d.done == [0, 1]
    assert old.tokens[7:] == [1000 + p for p in range(7, 17)]
    assert new.tokens[:len(tokens_then)] == tokens_then and new.n_generated == 10
    assert new.tokens[7:] == [1000 + p for p in range(7, 17)]
    assert d.pool.num_used == 0


def test_oldest_sequence_alone_gets_the_whole_pool():
    d = Driver(n_blocks=5, block_size=2, max_batch_tokens=8, max_running=3)
    seqs = [d.add([i + 1, i + 2], max_new=6) for i in range(3)]   # each needs 4 blocks at the end
    steps = 0
    while d.sched.has_work:
        d.step()
        steps += 1
        assert steps < 200, "no progress"
    assert sorted(d.done) == [0, 1, 2] and all(s.n_generated == 6 for s in seqs)
    assert d.sched.n_preemptions > 0 and d.pool.num_used == 0


def test_random_workload_keeps_invariants_and_leaves_no_blocks():
    rng = random.Random(1)
    d = Driver(n_blocks=24, block_size=4, max_batch_tokens=24, max_running=6)
    shared = [rng.randrange(1, 50) for _ in range(12)]
    live = []
    for _ in range(400):
        if rng.random() < 0.3 and len(d.done) + len(live) < 120:
            prompt = (shared[:rng.randrange(0, 13)] if rng.random() < 0.5 else []) + \
                [rng.randrange(1, 50) for _ in range(rng.randrange(1, 30))]
            live.append(d.add(prompt, max_new=rng.randrange(1, 12)))
        if live and rng.random() < 0.05:                    # abort a random live one
            victim = live.pop(rng.randrange(len(live)))
            if victim.state is not SeqState.FINISHED:
                d.sched.remove(victim)
        d.step()
        live = [s for s in live if s.state is not SeqState.FINISHED]
    while d.sched.has_work:
        d.step()
    assert d.pool.num_used == 0 and d.pool.num_free == d.pool.capacity
    assert d.sched.n_preemptions > 0 and d.pool.stats.hit_blocks > 0


def test_bad_limits():
    pool = BlockPool(4)
    with pytest.raises(ValueError, match="max_running"):
        Scheduler(pool, 8, 0, no_copy)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        Scheduler(pool, 2, 4, no_copy)
