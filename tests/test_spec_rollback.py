"""Speculative decoding's KV rollback, without a model: random drafts, random accept/reject
outcomes, finishes and preemption in a small pool. A fake KV store records the token each slot
was written for (the scheduler's forward writes every fed token, drafted ones included); after
every step each sequence's computed positions must read back its own tokens, every block in the
prefix cache must hold the tokens it is registered under, reference counts must equal the
tables holding each block, and at the end every block is free or cached."""
import random

import pytest

from localllm.engine.kv_blocks import NULL_BLOCK, BlockPool, BlockTable
from localllm.engine.scheduler import Scheduler, Sequence

BS = 4


class FakeKV:
    def __init__(self, n_blocks: int):
        self.slots = [[None] * BS for _ in range(n_blocks)]

    def copy_block(self, src: int, dst: int) -> None:
        self.slots[dst] = list(self.slots[src])

    def write(self, chunk) -> None:
        seq = chunk.seq
        fed = seq.tokens[chunk.start:chunk.start + chunk.n_tokens - chunk.n_draft] + seq.draft[:chunk.n_draft]
        assert len(fed) == chunk.n_tokens
        for i, tok in enumerate(fed):
            pos = chunk.start + i
            block = seq.table.blocks[pos // BS]
            assert block != NULL_BLOCK
            self.slots[block][pos % BS] = tok


def check(pool: BlockPool, sched: Scheduler, kv: FakeKV) -> None:
    refs = {}
    for seq in sched.running:
        for b in seq.table.blocks:
            refs[b] = refs.get(b, 0) + 1
        assert len(seq.table.blocks) * BS >= seq.num_computed
        for pos in range(seq.num_computed):
            assert kv.slots[seq.table.blocks[pos // BS]][pos % BS] == seq.tokens[pos], \
                f"seq {seq.seq_id} position {pos} reads another token's K/V"
    for seq in sched.waiting:
        assert seq.table.blocks == []
    for b in range(1, pool.n_blocks):
        assert pool.ref_counts[b] == refs.get(b, 0), f"block {b}: {pool.ref_counts[b]} refs, {refs.get(b, 0)} holders"
    for b, (_, toks) in pool._content_of.items():
        assert tuple(kv.slots[b]) == toks, f"cached block {b} holds other tokens than its key names"
    assert pool.num_free + pool.num_used == pool.capacity


@pytest.mark.parametrize("seed", range(12))
def test_random_accept_reject_leaves_pool_consistent(seed):
    rng = random.Random(seed)
    n_blocks = rng.choice([12, 20, 40])
    pool = BlockPool(n_blocks, BS)
    kv = FakeKV(n_blocks)
    sched = Scheduler(pool, max_batch_tokens=rng.choice([8, 16, 32]), max_running=4, copy_block=kv.copy_block)
    shared = [rng.randrange(50) for _ in range(9)]          # a common prefix: prefix-cache hits
    max_new, n_drafted, n_rejected = {}, 0, 0
    for i in range(10):
        prompt = (shared if rng.random() < 0.5 else []) + [rng.randrange(50) for _ in range(rng.randrange(1, 8))]
        seq = Sequence(i, prompt, len(prompt), BlockTable(pool), arrival=i)
        max_new[i] = rng.randrange(1, 14)
        sched.add(seq)
    for _ in range(400):
        if not sched.has_work:
            break
        for seq in sched.running:   # drafts: repeats of the sequence's own tokens or random ones
            left = max_new[seq.seq_id] - seq.n_generated - 1
            k = min(left, rng.randrange(0, 7)) if seq.remaining == 1 else 0
            seq.draft = [rng.choice(seq.tokens) if rng.random() < 0.5 else rng.randrange(50) for _ in range(max(0, k))]
        out = sched.schedule()
        for c in out.chunks:
            assert c.n_draft == 0 or (c.seq.remaining == 1 and c.n_draft <= len(c.seq.draft))
            kv.write(c)
        sched.commit(out)
        for c in out.chunks:
            if not c.wants_logits:
                continue
            seq, draft = c.seq, c.seq.draft[:c.n_draft]
            n_acc = rng.randrange(0, len(draft) + 1)
            emitted = draft[:n_acc] + [rng.randrange(50, 60)]   # the correction (or bonus) token
            n_drafted += len(draft)
            n_rejected += len(draft) - n_acc
            seq.tokens.extend(emitted)
            if seq.n_generated >= max_new[seq.seq_id]:
                sched.remove(seq)
            elif c.n_draft:
                sched.accept_draft(seq, n_acc)
                assert len(seq.table.blocks) == -(-seq.num_computed // BS)   # rejected tail released
            else:
                seq.draft.clear()
        check(pool, sched, kv)
    assert not sched.has_work
    assert pool.num_used == 0 and pool.num_free == pool.capacity     # every block free or cached
    assert n_drafted > 0 and n_rejected > 0


def test_truncate_releases_tail_and_keeps_cached_keys():
    pool = BlockPool(8, BS)
    table = BlockTable(pool)
    table.ensure(10)                      # 3 blocks
    blocks = list(table.blocks)
    table.register_full_blocks(keys := [b"k0", b"k1"], list(range(10)), 8)
    table.truncate(5)                     # positions 0..4 need 2 blocks
    assert table.blocks == blocks[:2] and table.n_registered == 2
    assert pool.ref_counts[blocks[2]] == 0 and pool.num_used == 2
    table.truncate(0)
    assert table.blocks == [] and table.n_registered == 0
    assert pool.num_used == 0 and pool.num_cached == 2 and pool.num_evictable == 2   # kept, evictable
    with pytest.raises(ValueError):
        table.truncate(-1)
    assert keys


def test_ngram_lookup_proposes_what_followed_the_latest_match():
    from localllm.engine.speculative import NgramProposer, SpecConfig
    prop = NgramProposer(SpecConfig(mode="ngram", draft_max=3, ngram_min=2, ngram_max=3))
    seq = Sequence(0, [1, 2, 3, 4, 9, 7, 2, 3, 5, 6, 1, 2, 3], 13, BlockTable(BlockPool(4, BS)), arrival=0)
    prop.propose([seq], [16])
    assert seq.draft == [4, 9, 7]              # the 3-gram (1, 2, 3) matched at 0 (longest first)
    seq.tokens += [8, 2, 3]                    # now only the 2-gram (2, 3) matches: latest at 11
    assert prop.lookup(seq, 3) == [8, 2, 3]
    assert prop.lookup(seq, 2) == [8, 2]
    seq.tokens += [42]                         # no earlier (3, 42) or (2, 3, 42): no draft
    assert prop.lookup(seq, 3) == []
    seq.tokens += [1, 2, 3]                    # (1, 2, 3) again: latest earlier match at 10
    prop = NgramProposer(SpecConfig(mode="ngram", draft_max=8, draft_min=4, ngram_max=4))
    prop.propose([seq], [2])                   # the request's limit caps the draft ...
    assert seq.draft == []                     # ... below draft_min
    prop = NgramProposer(SpecConfig(mode="ngram", draft_max=8, draft_min=4, ngram_max=4))
    prop.propose([seq], [16])
    assert seq.draft == [8, 2, 3, 42, 1, 2, 3]
    prop = NgramProposer(SpecConfig(mode="ngram", draft_max=8, draft_min=8, ngram_max=4))
    prop.propose([seq], [16])
    assert seq.draft == []                     # 7 tokens < draft_min: not worth verifying


def test_ngram_draft_length_adapts_to_what_was_accepted():
    """A draft cut short at a accepted tokens halves the cap, but not below a + 1; a draft
    accepted whole doubles it, up to draft_max."""
    from localllm.engine.speculative import NgramProposer, SpecConfig
    prop = NgramProposer(SpecConfig(mode="ngram", draft_max=8, ngram_min=1, ngram_max=1))
    seq = Sequence(0, list(range(1, 20)) + [1], 20, BlockTable(BlockPool(4, BS)), arrival=0)
    prop.propose([seq], [64])
    assert seq.draft == list(range(2, 10))     # 1 was followed by 2, 3, ...: a full draft of 8
    seq.tokens += [2, 3, 99]                   # the target accepted 2 and 3, then chose 99
    seq.tokens += [1]                          # (its next token: 1 again)
    prop.propose([seq], [64])
    assert seq.draft == [2, 3, 99, 1]          # cap 8 halved to 4 (>= 2 accepted + 1); latest match: the 1 at 19
    seq.tokens += [2, 3, 99, 1, 5]             # all 4 accepted, and the bonus token
    seq.tokens += [6, 1]
    prop.propose([seq], [64])
    assert seq.spec_state.cap == 8             # doubled (the match itself has 3 tokens left)
    for i, cap in enumerate((4, 2, 1, 1)):     # nothing accepted, again and again
        seq.tokens += [70 + i, 1]
        prop.propose([seq], [64])
        assert seq.spec_state.cap == cap and len(seq.draft) <= cap
