"""Block manager of the paged KV cache (storage lives in C++: ``_core.Model``).

The pool hands out fixed-size blocks of token slots. A sequence owns a *block table*: the
physical block of each run of ``block_size`` positions. Blocks are reference counted so that
several sequences can share one (a common prefix, a fork); a block is free again when its last
reference is dropped. Block 0 is reserved as the *null block*: padding in block tables points at
it and it is never handed out.

Automatic prefix caching: once a block is full, it is registered under a key that chains the
key of the block before it with its own token ids, so a key names a whole prefix. A later
sequence whose tokens start the same way finds those blocks and shares them instead of computing
them again. A cached block whose last reference goes away is not wiped: it joins an LRU list of
*evictable* blocks and keeps its contents until a fresh block is needed and nothing uncached is
free; then the least recently released one is evicted (its key forgotten) and handed out.

Copy-on-write: before a sequence writes into a block that someone else also references, it gets
a private copy (``copy_block(src, dst)`` copies the KV contents); a cached block it alone holds
is simply un-registered, since its contents are about to change.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

__all__ = ["BlockPool", "BlockTable", "CacheStats", "OutOfBlocks", "NULL_BLOCK", "prefix_keys", "reusable_blocks"]

NULL_BLOCK = 0

BlockKey = bytes                            # 16-byte blake2b digest of (parent key, token ids)
CopyBlock = Callable[[int, int], None]      # copy_block(src, dst): copy a block's KV contents


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


def _block_key(parent: Optional[BlockKey], tokens: Sequence[int]) -> BlockKey:
    h = hashlib.blake2b(digest_size=16)
    h.update(parent if parent is not None else b"root")
    h.update(np.asarray(tokens, dtype="<i4").tobytes())
    return h.digest()


def reusable_blocks(n_tokens: int, block_size: int) -> int:
    """How many leading blocks of a sequence of n_tokens the prefix cache may supply: only full
    blocks, and never the one holding the last token, which is recomputed so there are logits
    to continue from."""
    return (n_tokens - 1) // block_size


def prefix_keys(tokens: Sequence[int], block_size: int, keys: list[BlockKey] | None = None) -> list[BlockKey]:
    """Keys of every full block of ``tokens`` (key i names tokens[: (i + 1) * block_size]).

    ``keys`` already computed for a shorter prefix of the same tokens are extended in place.
    """
    keys = [] if keys is None else keys
    for i in range(len(keys), len(tokens) // block_size):
        parent = keys[i - 1] if i else None
        keys.append(_block_key(parent, tokens[i * block_size:(i + 1) * block_size]))
    return keys


@dataclass
class CacheStats:
    """Prefix-cache counters: lookups made at admission and what they found."""
    query_blocks: int = 0    # full blocks looked up
    hit_blocks: int = 0      # ... found in the cache (not computed again)
    query_tokens: int = 0
    hit_tokens: int = 0
    evictions: int = 0       # cached blocks whose contents were dropped to make room

    @property
    def miss_blocks(self) -> int:
        return self.query_blocks - self.hit_blocks

    @property
    def miss_tokens(self) -> int:
        return self.query_tokens - self.hit_tokens

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


class BlockPool:
    """Preallocated pool of ``n_blocks`` KV blocks: free list, reference counts, prefix cache."""

    def __init__(self, n_blocks: int, block_size: int = 16):
        if n_blocks < 2:
            raise ValueError(f"n_blocks must be >= 2 (block 0 is the null block), got {n_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.n_blocks = n_blocks
        self.block_size = block_size
        self.ref_counts = [0] * n_blocks
        self.ref_counts[NULL_BLOCK] = 1          # never freed, never allocated
        self._free: deque[int] = deque(range(1, n_blocks))   # unreferenced, holding nothing cached
        self._evictable: OrderedDict[int, None] = OrderedDict()  # unreferenced but cached; LRU first
        self._key_of: dict[int, BlockKey] = {}
        self._block_of: dict[BlockKey, int] = {}
        self._content_of: dict[int, tuple[Optional[BlockKey], tuple[int, ...]]] = {}
        self.stats = CacheStats()
        self.peak_used = 0

    # ---- state ----
    @property
    def capacity(self) -> int:
        """Blocks that can be handed out (all but the null block)."""
        return self.n_blocks - 1

    @property
    def num_free(self) -> int:
        """Blocks `allocate` can hand out now (free ones plus evictable cached ones)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.capacity - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks registered in the prefix cache (referenced or evictable)."""
        return len(self._key_of)

    @property
    def num_evictable(self) -> int:
        return len(self._evictable)

    @property
    def usage(self) -> float:
        return self.num_used / self.capacity

    def evictable_blocks(self) -> list[int]:
        """Evictable blocks, the next to be evicted first."""
        return list(self._evictable)

    def is_cached(self, block: int) -> bool:
        return block in self._key_of

    # ---- allocation and references ----
    def allocate(self) -> int:
        """Take a block (reference count 1): a free one, else evict the least recently used."""
        if self._free:
            block = self._free.popleft()
        elif self._evictable:
            block, _ = self._evictable.popitem(last=False)
            self._forget(block)
            self.stats.evictions += 1
        else:
            raise OutOfBlocks(f"KV cache full: all {self.capacity} blocks in use")
        self.ref_counts[block] = 1
        self.peak_used = max(self.peak_used, self.num_used)
        return block

    def share(self, block: int) -> int:
        """Add a reference to a block in use, or revive an evictable cached block."""
        self._check(block)
        if self.ref_counts[block] == 0:
            if block not in self._evictable:
                raise ValueError(f"block {block} is free and cannot be shared")
            del self._evictable[block]
        self.ref_counts[block] += 1
        self.peak_used = max(self.peak_used, self.num_used)
        return block

    def release(self, block: int) -> None:
        """Drop one reference; unreferenced, a cached block becomes evictable, others free."""
        self._check(block)
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} released more often than referenced")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            if block in self._key_of:
                self._evictable[block] = None    # most recently used end
            else:
                self._free.append(block)

    # ---- prefix cache ----
    def lookup(self, key: BlockKey, parent: Optional[BlockKey], tokens: Sequence[int]) -> Optional[int]:
        """The cached block holding exactly these tokens after this parent, or None.

        The stored parent key and token ids are compared too, so a hash collision is a miss.
        """
        block = self._block_of.get(key)
        if block is None or self._content_of[block] != (parent, tuple(tokens)):
            return None
        return block

    def register(self, block: int, key: BlockKey, parent: Optional[BlockKey], tokens: Sequence[int]) -> bool:
        """Record that a full block in use holds these tokens; False when the key is already
        cached (by another block with the same contents: this one stays uncached)."""
        self._check(block)
        if self.ref_counts[block] == 0:
            raise ValueError(f"block {block} is free: only blocks in use can be registered")
        if len(tokens) != self.block_size:
            raise ValueError(f"only full blocks are cached ({len(tokens)} of {self.block_size} tokens)")
        if block in self._key_of:
            raise ValueError(f"block {block} is already registered")
        if key in self._block_of:
            return False
        self._key_of[block] = key
        self._block_of[key] = block
        self._content_of[block] = (parent, tuple(int(t) for t in tokens))
        return True

    def unregister(self, block: int) -> None:
        """Forget a referenced block's key (its contents are about to change)."""
        if self.ref_counts[block] == 0:
            raise ValueError(f"block {block} is free")
        self._forget(block)

    def record_lookup(self, query_blocks: int, hit_blocks: int) -> None:
        s = self.stats
        s.query_blocks += query_blocks
        s.hit_blocks += hit_blocks
        s.query_tokens += query_blocks * self.block_size
        s.hit_tokens += hit_blocks * self.block_size

    def _forget(self, block: int) -> None:
        key = self._key_of.pop(block, None)
        if key is not None:
            del self._block_of[key]
            del self._content_of[block]

    def _check(self, block: int) -> None:
        if not (0 < block < self.n_blocks):
            raise ValueError(f"block id {block} out of range [1, {self.n_blocks})")


@dataclass
class BlockTable:
    """The blocks of one sequence, in position order; ``n_registered`` leading full blocks are
    in the prefix cache under this sequence's keys."""

    pool: BlockPool
    blocks: list[int] = field(default_factory=list)
    n_registered: int = 0

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.pool.block_size

    def match_prefix(self, keys: Sequence[BlockKey], tokens: Sequence[int], max_blocks: int) -> int:
        """On an empty table, share the cached blocks of the longest cached prefix of ``tokens``
        (at most ``max_blocks`` blocks); returns the number of blocks found."""
        if self.blocks:
            raise ValueError("match_prefix needs an empty block table")
        bs = self.pool.block_size
        for i in range(min(max_blocks, len(keys))):
            block = self.pool.lookup(keys[i], keys[i - 1] if i else None, tokens[i * bs:(i + 1) * bs])
            if block is None:
                break
            self.blocks.append(self.pool.share(block))
        self.n_registered = len(self.blocks)
        return len(self.blocks)

    def blocks_needed(self, start: int, end: int) -> int:
        """Fresh blocks that writing positions [start, end) would take (growth + copies)."""
        bs = self.pool.block_size
        grow = max(0, -(-end // bs) - len(self.blocks))
        last = min(len(self.blocks), -(-end // bs))
        copies = sum(1 for i in range(start // bs, last) if self.pool.ref_counts[self.blocks[i]] > 1)
        return grow + copies

    def prepare_write(self, start: int, end: int, copy_block: CopyBlock) -> None:
        """Make positions [start, end) writable: copy shared blocks there (copy-on-write),
        un-register cached ones, grow the table. All or nothing: OutOfBlocks changes nothing."""
        need = self.blocks_needed(start, end)
        if need > self.pool.num_free:
            raise OutOfBlocks(f"need {need} more KV blocks, {self.pool.num_free} free")
        bs = self.pool.block_size
        for i in range(start // bs, min(len(self.blocks), -(-end // bs))):
            block = self.blocks[i]
            if self.pool.ref_counts[block] > 1:
                fresh = self.pool.allocate()
                copy_block(block, fresh)
                self.pool.release(block)
                self.blocks[i] = fresh
            elif self.pool.is_cached(block):
                self.pool.unregister(block)
            self.n_registered = min(self.n_registered, i)
        self.ensure(end)

    def ensure(self, n_positions: int) -> None:
        """Grow until positions [0, n_positions) have a slot; all-or-nothing on failure."""
        need = -(-n_positions // self.pool.block_size) - len(self.blocks)
        if need > self.pool.num_free:
            raise OutOfBlocks(f"need {need} more KV blocks, {self.pool.num_free} free")
        for _ in range(max(0, need)):
            self.blocks.append(self.pool.allocate())

    def register_full_blocks(self, keys: Sequence[BlockKey], tokens: Sequence[int], n_computed: int) -> None:
        """Register every block whose positions are all computed (< n_computed) in the cache."""
        bs = self.pool.block_size
        n_full = min(n_computed // bs, len(keys), len(self.blocks))
        for i in range(self.n_registered, n_full):
            self.pool.register(self.blocks[i], keys[i], keys[i - 1] if i else None, tokens[i * bs:(i + 1) * bs])
        self.n_registered = max(self.n_registered, n_full)

    def truncate(self, n_positions: int) -> None:
        """Keep only the blocks that positions [0, n_positions) need and release the rest, last
        first (speculative decoding: the K/V of rejected draft tokens is dropped; no copy). A
        released cached block keeps its key (its contents still match it, so it turns evictable);
        a kept block partly beyond n_positions is un-registered by `prepare_write` before it
        is written again."""
        if n_positions < 0:
            raise ValueError(f"n_positions must be >= 0, got {n_positions}")
        keep = -(-n_positions // self.pool.block_size)
        while len(self.blocks) > keep:
            self.pool.release(self.blocks.pop())
        self.n_registered = min(self.n_registered, len(self.blocks))

    def fork(self) -> BlockTable:
        """A second table sharing every block (e.g. two continuations of one prompt)."""
        for block in self.blocks:
            self.pool.share(block)
        return BlockTable(self.pool, list(self.blocks), self.n_registered)

    def free(self) -> None:
        """Drop this sequence's reference to each of its blocks (last ones first, so that a
        prefix's tail is evicted before its head)."""
        for block in reversed(self.blocks):
            self.pool.release(block)
        self.blocks.clear()
        self.n_registered = 0
