"""The KV block pool, step by step: the pool's state is asserted after every operation."""
import pytest

from localllm.kv_blocks import NULL_BLOCK, BlockPool, BlockTable, OutOfBlocks


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
