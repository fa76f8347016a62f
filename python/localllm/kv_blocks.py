"""Block bookkeeping for the paged KV cache (storage lives in C++: ``_core.Model``).

The pool hands out fixed-size blocks of token slots. A sequence owns a *block table*: the
physical block of each run of ``block_size`` positions. Blocks are reference counted so that
several sequences can share one (a common prefix); a block returns to the free list when its
last reference is dropped. Block 0 is reserved as the *null block*: padding in block tables
points at it and it is never handed out.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["BlockPool", "BlockTable", "OutOfBlocks", "NULL_BLOCK"]

NULL_BLOCK = 0


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


class BlockPool:
    """Preallocated pool of ``n_blocks`` KV blocks with a free list and reference counts."""

    def __init__(self, n_blocks: int, block_size: int = 16):
        if n_blocks < 2:
            raise ValueError(f"n_blocks must be >= 2 (block 0 is the null block), got {n_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.n_blocks = n_blocks
        self.block_size = block_size
        self.ref_counts = [0] * n_blocks
        self.ref_counts[NULL_BLOCK] = 1          # never freed, never allocated
        self._free: deque[int] = deque(range(1, n_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.n_blocks - 1 - len(self._free)

    def allocate(self) -> int:
        """Take a free block (reference count 1)."""
        if not self._free:
            raise OutOfBlocks(f"KV cache full: all {self.n_blocks - 1} blocks in use")
        block = self._free.popleft()
        self.ref_counts[block] = 1
        return block

    def share(self, block: int) -> int:
        """Add a reference to a block in use (a second sequence reads it)."""
        self._check(block)
        if self.ref_counts[block] == 0:
            raise ValueError(f"block {block} is free and cannot be shared")
        self.ref_counts[block] += 1
        return block

    def release(self, block: int) -> None:
        """Drop one reference; the block is free again when none remain."""
        self._check(block)
        if self.ref_counts[block] <= 0:
            raise ValueError(f"block {block} released more often than referenced")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self._free.append(block)

    def _check(self, block: int) -> None:
        if not (0 < block < self.n_blocks):
            raise ValueError(f"block id {block} out of range [1, {self.n_blocks})")


@dataclass
class BlockTable:
    """The blocks of one sequence, in position order."""

    pool: BlockPool
    blocks: list[int] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.pool.block_size

    def ensure(self, n_positions: int) -> None:
        """Grow until positions [0, n_positions) have a slot; all-or-nothing on failure."""
        need = -(-n_positions // self.pool.block_size) - len(self.blocks)
        if need > self.pool.num_free:
            raise OutOfBlocks(f"need {need} more KV blocks, {self.pool.num_free} free")
        for _ in range(max(0, need)):
            self.blocks.append(self.pool.allocate())

    def free(self) -> None:
        for block in self.blocks:
            self.pool.release(block)
        self.blocks.clear()
