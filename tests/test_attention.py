"""Attention over the paged KV cache (csrc/backends/cpu/attention*.cpp), through _harness.attention_test.

The reference is float64 numpy with the kernel's documented roundings: q, K and V rounded to
F16, softmax of scale * q.K^T over positions [max(0, pos - window + 1), pos], probabilities
rounded to F16 before the product with V. Batch invariance is checked bit for bit: a sequence's
rows must not change with the other sequences of the batch, the thread count, how its tokens are
split into calls (prefill vs decode) or the kernel (AVX-512 vs scalar reference).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from localllm import _harness

AVX2, AVX512 = 1, 2
SIMD_KERNELS = [k for k, ok in ((AVX2, _harness.attention_avx2_available()), (AVX512, _harness.attention_avx512_available()))
                if ok]
SIMD = bool(SIMD_KERNELS)
KERNELS = [0, *SIMD_KERNELS]


@dataclass
class Batch:
    """K/V/q of every token of several sequences plus their paged-cache layout."""
    q: np.ndarray            # [T, n_head, hd] f32
    k: np.ndarray            # [T, n_head_kv, hd] f32
    v: np.ndarray            # [T, n_head_kv, hd] f32
    positions: np.ndarray    # [T] int32
    seq: np.ndarray          # [T] int32
    tables: np.ndarray       # [n_seqs, max_blocks] int32
    n_blocks: int
    block_size: int

    def run(self, rows, scale, window=0, kernel=-1, n_threads=2) -> np.ndarray:
        return _harness.attention_test(self.q, self.k, self.v, self.positions, self.seq, self.tables,
                                    self.n_blocks, self.block_size, np.asarray(rows, np.int32),
                                    scale, window, kernel, n_threads)

    def rows_of(self, s: int) -> np.ndarray:
        return np.flatnonzero(self.seq == s).astype(np.int32)


def make_batch(lengths, n_head, n_head_kv, hd, block_size=16, seed=0, seqs=None) -> Batch:
    """Sequences of the given lengths, tokens contiguous per sequence, physical blocks shuffled.
    seqs: per-sequence (q, k, v) arrays to reuse (so one sequence can be placed in several batches)."""
    rng = np.random.default_rng(seed)
    data = seqs or [tuple(rng.standard_normal((n, h, hd)).astype(np.float32) * 1.5
                          for h in (n_head, n_head_kv, n_head_kv)) for n in lengths]
    n_blk = [(n + block_size - 1) // block_size for n in lengths]
    max_blocks = max(n_blk)
    ids = rng.permutation(sum(n_blk) + 3).astype(np.int32)   # spare blocks, shuffled layout
    tables = np.full((len(lengths), max_blocks), -1, np.int32)
    used = 0
    for s, nb in enumerate(n_blk):
        tables[s, :nb] = ids[used:used + nb]
        used += nb
    cat = lambda i: np.concatenate([d[i] for d in data])
    return Batch(cat(0), cat(1), cat(2), np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
                 np.concatenate([np.full(n, s, np.int32) for s, n in enumerate(lengths)]), tables,
                 len(ids), block_size)


def reference(b: Batch, rows, scale: float, window: int, softcap: float = 0.0) -> np.ndarray:
    """float64 attention of the given token rows (numerics as documented in attention.h);
    softcap > 0: scores soft-capped to softcap * tanh(s / softcap) (Gemma 2)."""
    f16 = lambda a: a.astype(np.float16).astype(np.float64)
    return attend(b, rows, f16(b.q), f16(b.k), f16(b.v), scale, window, softcap)


def attend(b: Batch, rows, q, k, v, scale: float, window: int, softcap: float = 0.0) -> np.ndarray:
    """float64 attention of the given rows over q, k, v as the kernel reads them (already
    rounded), with the probabilities rounded to F16 before the product with V."""
    group = q.shape[1] // k.shape[1]
    out = np.zeros((len(rows),) + q.shape[1:])
    for i, t in enumerate(rows):
        own = np.flatnonzero(b.seq == b.seq[t])
        pos = b.positions[t]
        keys = own[(b.positions[own] <= pos) & (b.positions[own] > (pos - window if window > 0 else -1))]
        for h in range(q.shape[1]):
            s = k[keys, h // group] @ q[t, h] * scale
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            e = np.exp(s - s.max())
            p = (e / e.sum()).astype(np.float16).astype(np.float64)
            out[i, h] = p @ v[keys, h // group]
    return out


@pytest.mark.parametrize("hd,n_head,n_head_kv,window", [
    (64, 9, 3, 0), (64, 14, 2, 0), (64, 6, 6, 19), (128, 8, 2, 0), (128, 4, 1, 40), (256, 4, 1, 0),
    (256, 8, 2, 23), (48, 3, 1, 0), (6, 4, 2, 7)])
@pytest.mark.parametrize("kernel", KERNELS)
def test_matches_float64_reference(hd, n_head, n_head_kv, window, kernel):
    if (kernel == AVX512 and hd % 16) or (kernel == AVX2 and hd % 8):
        pytest.skip("the SIMD kernels need head_dim % 16 (AVX-512) or % 8 (AVX2) == 0 (auto falls back)")
    b = make_batch([37, 1, 70, 16], n_head, n_head_kv, hd, seed=hd + window)
    rows = np.arange(len(b.seq), dtype=np.int32)
    scale = 1.0 / np.sqrt(hd)
    got = b.run(rows, scale, window, kernel)
    want = reference(b, rows, scale, window)
    tol = 1e-3 * np.abs(b.v).max()
    assert np.abs(got - want).max() < tol, np.abs(got - want).max()


@pytest.mark.skipif(not SIMD, reason="no SIMD attention kernel here")
@pytest.mark.parametrize("kernel", SIMD_KERNELS)
@pytest.mark.parametrize("hd,n_head,n_head_kv,window,block_size", [
    (64, 9, 3, 0, 16), (128, 8, 2, 33, 16), (256, 4, 1, 0, 16), (48, 6, 2, 10, 16), (64, 9, 3, 21, 5),
    (40, 5, 1, 3, 7)])
def test_simd_bit_identical_to_scalar(hd, n_head, n_head_kv, window, block_size, kernel):
    if hd % (16 if kernel == AVX512 else 8):
        pytest.skip("head_dim not a multiple of this kernel's width")
    b = make_batch([130, 3, 45], n_head, n_head_kv, hd, block_size=block_size, seed=7)
    rows = np.arange(len(b.seq), dtype=np.int32)
    simd = b.run(rows, 0.3, window, kernel=kernel)
    scalar = b.run(rows, 0.3, window, kernel=0)
    assert np.array_equal(simd.view(np.uint32), scalar.view(np.uint32))


@pytest.mark.parametrize("hd,n_head,n_head_kv,window", [(64, 9, 3, 0), (256, 4, 1, 50), (128, 14, 2, 0)])
def test_batch_invariance(hd, n_head, n_head_kv, window):
    """One sequence's rows are bit-identical alone, among others, at any thread count, and in
    decode (one token, the rest in the cache) or partial-prefill calls."""
    rng = np.random.default_rng(1)
    mine = tuple(rng.standard_normal((90, h, hd)).astype(np.float32) for h in (n_head, n_head_kv, n_head_kv))
    other = lambda n: tuple(rng.standard_normal((n, h, hd)).astype(np.float32) for h in (n_head, n_head_kv, n_head_kv))
    scale = 1.0 / np.sqrt(hd)
    alone = make_batch([90], n_head, n_head_kv, hd, seqs=[mine], seed=2)
    base = alone.run(alone.rows_of(0), scale, window, n_threads=1)
    bits = lambda a: a.view(np.uint32)

    for n_threads in (2, 3):
        assert np.array_equal(bits(alone.run(alone.rows_of(0), scale, window, n_threads=n_threads)), bits(base))
    for lengths, at in (([5, 90, 33], 1), ([90, 200, 1, 17], 0), ([64, 7, 90], 2)):
        seqs = [other(n) for n in lengths]
        seqs[at] = mine
        mixed = make_batch(lengths, n_head, n_head_kv, hd, seqs=seqs, seed=len(lengths), block_size=16)
        out = mixed.run(np.arange(len(mixed.seq)), scale, window)
        assert np.array_equal(bits(out[mixed.rows_of(at)]), bits(base))
    # Decode: only the last token queries, its keys come from the cache.
    last = alone.rows_of(0)[-1:]
    assert np.array_equal(bits(alone.run(last, scale, window)), bits(base[-1:]))
    # Partial prefill: the last 29 tokens query, the first 61 are cached; and one token of several
    # sequences at once, as continuous batching decodes.
    tail = alone.rows_of(0)[61:]
    assert np.array_equal(bits(alone.run(tail, scale, window)), bits(base[61:]))
    many = make_batch([40, 90, 12], n_head, n_head_kv, hd, seqs=[other(40), mine, other(12)], seed=5)
    ends = np.array([39, 129, 141], np.int32)
    assert np.array_equal(bits(many.run(ends, scale, window)[1]), bits(base[-1]))
    for kernel in (0, *SIMD_KERNELS):   # and every kernel agrees bit for bit
        assert np.array_equal(bits(alone.run(alone.rows_of(0), scale, window, kernel=kernel)), bits(base))


@pytest.mark.parametrize("numerics", ["fast", "llama.cpp"])
@pytest.mark.parametrize("hd,n_head,n_head_kv,lengths", [(32, 12, 12, [13, 5, 40]), (64, 8, 2, [70, 1, 17])])
def test_rows_at_one_position_see_the_whole_sequence(hd, n_head, n_head_kv, lengths, numerics):
    """An encoder's attention (Model::bidirectional_view): every row of a sequence queries at its
    last position, so each sees all the sequence's keys. Many rows at one position in one call
    give, bit for bit, what each gives queried alone (fast numerics), the same on every kernel, and
    the float64 reference."""
    b = make_batch(lengths, n_head, n_head_kv, hd, seed=3)
    rows = np.arange(len(b.seq), dtype=np.int32)
    last = np.array([lengths[s] - 1 for s in b.seq], np.int32)
    scale = 1.0 / np.sqrt(hd)
    run = lambda r, kernel: _harness.attention_test(b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, 16,
                                                    r, scale, 0, kernel, 2, numerics, query_positions=last[r])
    together = run(rows, -1)
    bits = lambda a: a.view(np.uint32)
    for kernel in KERNELS:
        assert np.array_equal(bits(run(rows, kernel)), bits(together))
    for t in (0, lengths[0] - 1, len(rows) - 1) if numerics == "fast" else ():   # llama.cpp's order depends
        assert np.array_equal(bits(run(rows[t:t + 1], -1)), bits(together[t:t + 1]))  # on the call's row count
    f16 = lambda a: a.astype(np.float16).astype(np.float64)
    whole = Batch(b.q, b.k, b.v, last, b.seq, b.tables, b.n_blocks, 16)   # keys by sequence, at its last position
    want = attend(whole, rows, f16(b.q), f16(b.k), f16(b.v), scale, 0)
    assert np.abs(together - want).max() < 1e-3 * np.abs(b.v).max()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("numerics", ["fast", "llama.cpp"])
def test_softcap(kernel, numerics):
    """Gemma 2's soft-capped scores: every kernel against the float64 reference, and bit for bit
    against the scalar one; a cap of 1 on scores of a few units changes the result."""
    b = make_batch([37, 1, 70], 8, 2, 64, seed=11)
    rows = np.arange(len(b.seq), dtype=np.int32)
    run = lambda k, cap: _harness.attention_test(b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, 16, rows,
                                              0.5, 9, k if numerics == "fast" else (0 if k == 0 else -1),
                                              2, numerics, cap)
    got = run(kernel, 1.0)
    want = reference(b, rows, 0.5, 9, softcap=1.0)
    tol = 1e-3 * np.abs(b.v).max()
    assert np.abs(got - want).max() < tol
    assert np.abs(run(kernel, 0.0) - want).max() > 50 * tol
    if numerics == "fast":
        assert np.array_equal(got.view(np.uint32), run(0, 1.0).view(np.uint32))


def test_block_size_not_multiple_of_16():
    b16 = make_batch([50, 21], 8, 2, 64, block_size=16, seed=3)
    b5 = make_batch([50, 21], 8, 2, 64, block_size=5, seed=3,
                    seqs=[(b16.q[:50], b16.k[:50], b16.v[:50]), (b16.q[50:], b16.k[50:], b16.v[50:])])
    rows = np.arange(71, dtype=np.int32)
    got = b5.run(rows, 0.125, 9)
    assert np.array_equal(got.view(np.uint32), b16.run(rows, 0.125, 9).view(np.uint32))
    assert np.abs(got - reference(b5, rows, 0.125, 9)).max() < 1e-3 * np.abs(b5.v).max()


def test_exp_accuracy():
    x = -np.linspace(0.0, 87.29, 1_000_003).astype(np.float32)
    got = _harness.attention_exp(x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    ulps = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 2.0, ulps.max()
    assert _harness.attention_exp(np.array([0.0], np.float32))[0] == 1.0
    # Below the range softmax needs (results under FLT_MIN) the exp is 0, so is a masked key's -inf.
    assert np.all(_harness.attention_exp(np.array([-87.4, -100.0, -np.inf], np.float32)) == 0.0)
    # Positive arguments (never passed by softmax) are refused, not scaled past the exponent
    # (found by UBSan under tests/sanitize.sh: the float -> int conversion overflowed).
    for bad in (1e-30, 1.0, 2147483647.0, np.inf):
        with pytest.raises(ValueError, match="positive"):
            _harness.attention_exp(np.array([-1.0, bad], np.float32))


def test_bad_input_raises():
    b = make_batch([20], 4, 2, 64)
    rows = np.arange(20, dtype=np.int32)
    with pytest.raises(ValueError, match="n_head"):
        _harness.attention_test(b.q[:, :3], b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, 16, rows, 1.0)
    bad = b.tables.copy()
    bad[0, 0] = b.n_blocks + 5
    with pytest.raises(ValueError, match="block"):
        _harness.attention_test(b.q, b.k, b.v, b.positions, b.seq, bad, b.n_blocks, 16, rows, 1.0)
    with pytest.raises(ValueError, match="decrease"):
        _harness.attention_test(b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, 16, rows[::-1].copy(), 1.0)
    with pytest.raises(ValueError, match="window"):
        b.run(rows, 1.0, window=-1)
    with pytest.raises(ValueError, match="kernel"):
        b.run(rows, 1.0, kernel=3)
    for kernel, ok in ((AVX2, _harness.attention_avx2_available()), (AVX512, _harness.attention_avx512_available())):
        if not ok:   # a kernel this CPU lacks is refused, not silently replaced
            with pytest.raises(ValueError, match="not available"):
                b.run(rows, 1.0, kernel=kernel)
