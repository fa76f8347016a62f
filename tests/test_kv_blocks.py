"""The KV block pool, step by step: the pool's state is asserted after every operation."""
import numpy as np
import pytest

from localllm.engine.kv_blocks import NULL_BLOCK, BlockPool, BlockTable, OutOfBlocks, prefix_keys


def test_allocate_release_free_list_order():
    pool = BlockPool(5, block_size=4)
    assert (pool.num_free, pool.num_used) == (4, 0)
    a, b = pool.allocate(), pool.allocate()
    assert NULL_BLOCK not in (a, b) and a != b
    assert (pool.num_free, pool.num_used) == (2, 2)
    assert pool.ref_counts[a] == pool.ref_counts[b] == 1
    pool.release(a)
    assert pool.ref_counts[a] == 0 and pool.num_free == 3
    c, d = pool.allocate(), pool.allocate()
    e = pool.allocate()                      # the released block comes back last (FIFO)
    assert e == a and {c, d, e, b} == {1, 2, 3, 4}
    with pytest.raises(OutOfBlocks):
        pool.allocate()


def test_share_and_release_reference_counts():
    pool = BlockPool(3, block_size=4)
    a = pool.allocate()
    pool.share(a)
    assert pool.ref_counts[a] == 2
    pool.release(a)
    assert pool.ref_counts[a] == 1 and pool.num_free == 1
    pool.release(a)
    assert pool.ref_counts[a] == 0 and pool.num_free == 2
    with pytest.raises(ValueError, match="released more often"):
        pool.release(a)
    with pytest.raises(ValueError, match="free"):
        pool.share(a)
    with pytest.raises(ValueError, match="out of range"):
        pool.release(NULL_BLOCK)


def test_block_table_grows_by_blocks_and_is_all_or_nothing():
    pool = BlockPool(4, block_size=4)        # 3 usable blocks = 12 slots
    t = BlockTable(pool)
    t.ensure(1)
    assert len(t.blocks) == 1 and t.capacity == 4
    t.ensure(4)
    assert len(t.blocks) == 1
    t.ensure(5)
    assert len(t.blocks) == 2 and pool.num_free == 1
    with pytest.raises(OutOfBlocks):
        t.ensure(13)                         # needs 2 more, only 1 free: nothing taken
    assert len(t.blocks) == 2 and pool.num_free == 1
    t.free()
    assert t.blocks == [] and pool.num_free == 3


def test_bad_pool_sizes():
    with pytest.raises(ValueError, match="n_blocks"):
        BlockPool(1)
    with pytest.raises(ValueError, match="block_size"):
        BlockPool(4, block_size=0)


# ---- prefix cache, fork, copy-on-write, eviction, preemption ----


class SlotStore:
    """A stand-in KV storage with the same block layout: slot (block, offset) holds the token id
    written there, so copy-on-write can be checked by reading what each sequence sees."""

    def __init__(self, pool: BlockPool):
        self.bs = pool.block_size
        self.slots = np.full((pool.n_blocks, pool.block_size), -1, np.int64)
        self.copies: list[tuple[int, int]] = []

    def copy_block(self, src: int, dst: int) -> None:
        self.slots[dst] = self.slots[src]
        self.copies.append((src, dst))

    def write(self, table: BlockTable, start: int, tokens: list[int]) -> None:
        table.prepare_write(start, start + len(tokens), self.copy_block)
        for i, t in enumerate(tokens):
            p = start + i
            self.slots[table.blocks[p // self.bs], p % self.bs] = t

    def read(self, table: BlockTable, n: int) -> list[int]:
        return [int(self.slots[table.blocks[p // self.bs], p % self.bs]) for p in range(n)]


def test_prefix_keys_chain_and_extend():
    toks = list(range(10))
    keys = prefix_keys(toks, 4)
    assert len(keys) == 2                                  # only full blocks get a key
    assert prefix_keys(toks[:8], 4) == keys
    assert prefix_keys(toks + [99, 98], 4, list(keys))[:2] == keys   # extended in place
    other = prefix_keys([0, 1, 2, 3] + [4, 5, 6, 7], 4)
    assert other[1] == keys[1]
    changed = prefix_keys([9, 1, 2, 3, 4, 5, 6, 7], 4)
    assert changed[1] != keys[1]                           # second key depends on the first block


def test_register_lookup_and_cache_hit_after_free():
    pool = BlockPool(6, block_size=4)
    store = SlotStore(pool)
    toks = [5, 6, 7, 8, 9, 10, 11, 12, 13]
    a = BlockTable(pool)
    store.write(a, 0, toks)
    assert len(a.blocks) == 3 and pool.num_used == 3
    keys = prefix_keys(toks, 4)
    a.register_full_blocks(keys, toks, n_computed=len(toks))
    assert pool.num_cached == 2 and a.n_registered == 2    # the partial third block is not cached
    assert pool.lookup(keys[0], None, toks[:4]) == a.blocks[0]
    assert pool.lookup(keys[1], keys[0], toks[4:8]) == a.blocks[1]
    assert pool.lookup(keys[1], keys[0], [0, 0, 0, 0]) is None   # same key, other tokens: a miss
    first, second, third = a.blocks
    a.free()
    # Cached blocks become evictable (tail first), the partial one is plainly free.
    assert pool.num_used == 0 and pool.num_free == 5
    assert pool.num_evictable == 2 and pool.evictable_blocks() == [second, first]
    assert pool.ref_counts[first] == 0 and pool.is_cached(first) and not pool.is_cached(third)
    b = BlockTable(pool)
    assert b.match_prefix(keys, toks, max_blocks=2) == 2
    assert b.blocks == [first, second] and pool.ref_counts[first] == 1
    assert pool.num_evictable == 0 and pool.num_used == 2
    assert store.read(b, 8) == toks[:8]                    # the contents survived the free


def test_match_prefix_stops_at_first_miss_and_respects_max():
    pool = BlockPool(8, block_size=2)
    toks = [1, 2, 3, 4, 5, 6]
    a = BlockTable(pool)
    a.ensure(6)
    keys = prefix_keys(toks, 2)
    a.register_full_blocks(keys, toks, n_computed=6)
    b = BlockTable(pool)
    assert b.match_prefix(keys, toks, max_blocks=2) == 2   # capped (e.g. keep the last token)
    assert [pool.ref_counts[x] for x in a.blocks] == [2, 2, 1]
    c = BlockTable(pool)
    other = [1, 2, 9, 9, 5, 6]
    assert c.match_prefix(prefix_keys(other, 2), other, max_blocks=3) == 1
    assert c.blocks == a.blocks[:1] and pool.ref_counts[a.blocks[0]] == 3
    with pytest.raises(ValueError, match="empty"):
        c.match_prefix(keys, toks, 1)


def test_duplicate_content_stays_uncached():
    pool = BlockPool(4, block_size=2)
    toks = [3, 4]
    keys = prefix_keys(toks, 2)
    a, b = BlockTable(pool), BlockTable(pool)
    a.ensure(2)
    b.ensure(2)
    a.register_full_blocks(keys, toks, 2)
    b.register_full_blocks(keys, toks, 2)                  # computed the same block concurrently
    assert pool.num_cached == 1 and pool.is_cached(a.blocks[0]) and not pool.is_cached(b.blocks[0])
    dup = b.blocks[0]
    b.free()
    assert pool.num_evictable == 0 and pool.ref_counts[dup] == 0 and pool.num_free == 2


def test_lru_eviction_order():
    pool = BlockPool(4, block_size=2)                      # 3 usable blocks
    tables = []
    for toks in ([1, 1], [2, 2], [3, 3]):
        t = BlockTable(pool)
        t.ensure(2)
        t.register_full_blocks(prefix_keys(toks, 2), toks, 2)
        tables.append(t)
    blocks = [t.blocks[0] for t in tables]
    for i in (1, 0, 2):                                    # released in this order
        tables[i].free()
    assert pool.num_free == 3 and pool.num_evictable == 3
    assert pool.evictable_blocks() == [blocks[1], blocks[0], blocks[2]]
    # Reviving [1, 1] moves it out of the LRU; a fresh allocation evicts the oldest: [2, 2].
    revived = BlockTable(pool)
    assert revived.match_prefix(prefix_keys([1, 1], 2), [1, 1], 1) == 1
    assert pool.evictable_blocks() == [blocks[1], blocks[2]]
    fresh = pool.allocate()
    assert fresh == blocks[1] and pool.stats.evictions == 1
    assert not pool.is_cached(fresh) and pool.ref_counts[fresh] == 1
    assert pool.lookup(prefix_keys([2, 2], 2)[0], None, [2, 2]) is None     # forgotten
    revived.free()                                         # back to the MRU end
    assert pool.evictable_blocks() == [blocks[2], blocks[0]]
    assert pool.allocate() == blocks[2] and pool.allocate() == blocks[0]
    assert pool.num_free == 0 and pool.num_cached == 0 and pool.stats.evictions == 3
    with pytest.raises(OutOfBlocks):
        pool.allocate()


def test_free_blocks_are_used_before_evicting_cached_ones():
    pool = BlockPool(4, block_size=2)
    t = BlockTable(pool)
    t.ensure(2)
    t.register_full_blocks(prefix_keys([7, 7], 2), [7, 7], 2)
    cached = t.blocks[0]
    t.free()
    got = {pool.allocate(), pool.allocate()}
    assert cached not in got and pool.is_cached(cached) and pool.stats.evictions == 0
    assert pool.allocate() == cached and pool.stats.evictions == 1


def test_fork_and_copy_on_write():
    pool = BlockPool(8, block_size=4)
    store = SlotStore(pool)
    parent = BlockTable(pool)
    store.write(parent, 0, [1, 2, 3, 4, 5, 6])              # 1.5 blocks
    child = parent.fork()
    assert child.blocks == parent.blocks
    assert [pool.ref_counts[b] for b in parent.blocks] == [2, 2] and pool.num_used == 2
    assert child.blocks_needed(6, 7) == 1                  # writing into the shared partial block
    store.write(child, 6, [70])                            # copy-on-write of block 1 only
    assert store.copies == [(parent.blocks[1], child.blocks[1])]
    assert child.blocks[0] == parent.blocks[0] and child.blocks[1] != parent.blocks[1]
    assert pool.ref_counts[parent.blocks[0]] == 2 and pool.ref_counts[parent.blocks[1]] == 1
    assert pool.ref_counts[child.blocks[1]] == 1 and pool.num_used == 3
    store.write(parent, 6, [60])                           # the parent now owns its block alone
    assert len(store.copies) == 1
    assert store.read(parent, 7) == [1, 2, 3, 4, 5, 6, 60]
    assert store.read(child, 7) == [1, 2, 3, 4, 5, 6, 70]
    store.write(child, 7, [71, 72])                        # grows into a fresh block, no copy
    assert len(store.copies) == 1 and len(child.blocks) == 3 and pool.num_used == 4
    parent.free()
    assert pool.ref_counts[child.blocks[0]] == 1 and pool.num_used == 3
    child.free()
    assert pool.num_used == 0 and pool.num_free == 7


def test_copy_on_write_is_all_or_nothing_and_uncaches_owned_blocks():
    pool = BlockPool(4, block_size=2)                      # 3 usable
    store = SlotStore(pool)
    a = BlockTable(pool)
    store.write(a, 0, [1, 2, 3])
    b = a.fork()
    store.write(b, 3, [4])                                 # copy of the shared partial block
    assert pool.num_free == 0
    c = a.fork()
    before = (list(c.blocks), list(pool.ref_counts))
    with pytest.raises(OutOfBlocks):
        store.write(c, 3, [5])                             # needs a copy, nothing free
    assert (c.blocks, pool.ref_counts) == before
    # A cached block written by its only owner is un-registered instead of copied.
    c.free()
    b.free()
    toks = [1, 2]
    a.register_full_blocks(prefix_keys(toks, 2), toks, 2)
    assert pool.is_cached(a.blocks[0]) and pool.ref_counts[a.blocks[0]] == 1
    n_copies = len(store.copies)
    store.write(a, 1, [9])
    assert not pool.is_cached(a.blocks[0]) and a.n_registered == 0
    assert len(store.copies) == n_copies and pool.ref_counts[a.blocks[0]] == 1
    assert store.read(a, 3) == [1, 9, 3]


def test_preemption_frees_then_recompute_hits_the_cache():
    """Preemption at block level: a sequence's table is freed (its full blocks stay cached), a
    newer sequence takes the room, and the preempted one later re-matches what survived."""
    pool = BlockPool(6, block_size=2)                      # 5 usable
    store = SlotStore(pool)
    old_toks = [1, 2, 3, 4, 5]
    old = BlockTable(pool)
    store.write(old, 0, old_toks)
    keys = prefix_keys(old_toks, 2)
    old.register_full_blocks(keys, old_toks, 5)
    assert pool.num_used == 3 and pool.num_cached == 2
    old.free()                                             # preempted
    assert pool.num_used == 0 and pool.num_evictable == 2 and pool.num_free == 5
    young = BlockTable(pool)
    store.write(young, 0, [9] * 7)                         # 4 blocks: 3 free + evicts 1 cached
    assert pool.stats.evictions == 1 and pool.num_cached == 1 and pool.num_free == 1
    # The tail block was evicted first (released first), so the head block is still cached.
    back = BlockTable(pool)
    assert back.match_prefix(keys, old_toks, max_blocks=(len(old_toks) - 1) // 2) == 1
    assert store.read(back, 2) == [1, 2] and pool.num_free == 0 and pool.num_evictable == 0
    with pytest.raises(OutOfBlocks):
        store.write(back, 2, [3, 4, 5])                    # needs 2, none free: nothing changes
    assert len(back.blocks) == 1 and pool.num_used == 5
    young.free()
    store.write(back, 2, [3, 4, 5])
    assert store.read(back, 5) == old_toks and pool.num_used == 3


def test_counters_and_usage():
    pool = BlockPool(5, block_size=4)
    pool.record_lookup(3, 2)
    s = pool.stats
    assert (s.query_blocks, s.hit_blocks, s.miss_blocks) == (3, 2, 1)
    assert (s.query_tokens, s.hit_tokens, s.miss_tokens) == (12, 8, 4)
    assert s.hit_rate == pytest.approx(2 / 3)
    t = BlockTable(pool)
    t.ensure(9)
    assert pool.usage == 0.75 and pool.peak_used == 3
    t.free()
    assert pool.usage == 0 and pool.peak_used == 3


def test_register_rejects_misuse():
    pool = BlockPool(4, block_size=2)
    b = pool.allocate()
    with pytest.raises(ValueError, match="full blocks"):
        pool.register(b, b"k" * 16, None, [1])
    assert pool.register(b, b"k" * 16, None, [1, 2])
    with pytest.raises(ValueError, match="already registered"):
        pool.register(b, b"j" * 16, None, [1, 2])
    free = pool.allocate()
    pool.release(free)
    with pytest.raises(ValueError, match="free"):
        pool.register(free, b"x" * 16, None, [1, 2])
