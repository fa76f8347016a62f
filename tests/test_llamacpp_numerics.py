"""The "llama.cpp numerics" kernels (csrc/backends/cpu/ggml_numerics/ggml_math.h, quants/ggml_legacy.cpp, attention_ggml.cpp).

They reproduce llama.cpp's x86 float order exactly; tests/test_fidelity.py holds the whole
forward to llama.cpp's logits bit for bit. Here each kernel is held to an independent numpy
statement of the order it claims (ggml's 8 lane accumulators, its horizontal-add trees), and its
SIMD paths (AVX2 and AVX-512 for the legacy matmuls, AVX-512 for attention) to its scalar
reference, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from localllm import _core, _harness
from test_attention import make_batch

LEGACY = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}
f32 = np.float32
H = float.fromhex


def _f16(raw: np.ndarray, off: int) -> np.ndarray:
    return raw[..., off:off + 2].copy().view(np.float16)[..., 0].astype(f32)


def _hsum8(a: np.ndarray) -> np.ndarray:
    """ggml's hsum_float_8 over the last axis: (a[k] + a[k+4]), then (0 + 2) + (1 + 3)."""
    r = (a[..., 4:8] + a[..., 0:4]).astype(f32)
    return ((r[..., 0] + r[..., 2]).astype(f32) + (r[..., 1] + r[..., 3]).astype(f32)).astype(f32)


def _fma(a, b, c):
    """fmaf: float64 holds a float product exactly, so one rounding at the end."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f32)


def _weight_quants(raw: np.ndarray, wtype: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """[N, nb, bytes] blocks -> (quants as fed to the integer dot [N, nb, 32], d, m or None)."""
    d = _f16(raw, 0)
    if wtype == 8:
        return raw[..., 2:34].view(np.int8).astype(np.int64), d, None
    has_min = wtype in (3, 7)
    qs = raw[..., (4 if has_min else 2) + (4 if wtype in (6, 7) else 0):]
    q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int64)
    if wtype in (6, 7):
        qh = raw[..., (4 if has_min else 2):(4 if has_min else 2) + 4].copy().view(np.uint32)[..., 0]
        q |= ((qh[..., None] >> np.arange(32)) & 1).astype(np.int64) << 4
    if not has_min:
        q -= 8 if wtype == 2 else 16
    return q, d, (_f16(raw, 2) if has_min else None)


def _legacy_numpy(w_raw: np.ndarray, wtype: int, x_raw: np.ndarray) -> np.ndarray:
    """Y[m, n]: per block, 8 lane sums of 4 products each, FMA'd into 8 accumulators by
    d_w * d_x; Q4_1 / Q5_1 add the FMA'd sum of m_w * s_x after the 8-lane horizontal sum."""
    N, M = w_raw.shape[0], x_raw.shape[0]
    nb = x_raw.shape[1] // (36 if wtype in (3, 7) else 34)
    wq, wd, wm = _weight_quants(w_raw.reshape(N, nb, -1), wtype)
    xb = x_raw.reshape(M, nb, -1)
    xd = _f16(xb, 0)
    xq = xb[..., (4 if wm is not None else 2):].view(np.int8).astype(np.int64)
    y = np.zeros((M, N), f32)
    for m in range(M):
        lanes = (wq * xq[m][None]).reshape(N, nb, 8, 4).sum(-1).astype(f32)
        acc, summs = np.zeros((N, 8), f32), np.zeros(N, f32)
        for b in range(nb):
            dd = (wd[:, b] * xd[m, b]).astype(f32)
            acc = _fma(np.repeat(dd[:, None], 8, 1), lanes[:, b], acc)
            if wm is not None:
                summs = _fma(wm[:, b], np.full(N, _f16(xb[m, b], 2)), summs)
        y[m] = (_hsum8(acc) + summs).astype(f32)
    return y


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_matmul_is_ggmls_order(name):
    """The kernel against an independent numpy statement of ggml's order, and its SIMD path (the
    best this CPU has) against its scalar reference, bit for bit; rows of 1 to 7 activations
    (decode, tiles, edges) and an odd number of weight rows (the pair tiles' last row)."""
    wtype = LEGACY[name]
    rng = np.random.default_rng(wtype)
    N, K = 25, 256
    w = _core.quantize(rng.standard_normal((N, K)).astype(f32) * 0.1, wtype).reshape(N, -1)
    vdt = 9 if wtype in (3, 7) else 8
    for M in (1, 3, 4, 7):
        x = (rng.standard_normal((M, K)) * rng.uniform(0.1, 10, (M, 1))).astype(f32)
        fast = _harness.matmul_llamacpp(w, wtype, N, K, x)
        ref = _harness.matmul_llamacpp(w, wtype, N, K, x, reference=True)
        xq = np.stack([_harness.quantize_act(row, vdt) for row in x])
        want = _legacy_numpy(w, wtype, xq)
        assert np.array_equal(ref.view(np.uint32), want.view(np.uint32)), f"{name} M={M}: reference vs numpy"
        assert np.array_equal(fast.view(np.uint32), ref.view(np.uint32)), f"{name} M={M}: fast vs reference"


def test_matmul_llamacpp_rejects_types_without_a_kernel():
    w = np.zeros((16, 176), np.uint8)          # Q5_K: no llama.cpp-order kernel yet
    with pytest.raises(ValueError, match="no llama.cpp-order kernel for Q5_K"):
        _harness.matmul_llamacpp(w, 13, 16, 256, np.zeros((1, 256), f32))


def _expf_ggml(x: np.ndarray) -> np.ndarray:
    """ggml's vector expf in numpy (fma emulated in float64)."""
    x = x.astype(f32)
    z = _fma(x, np.full_like(x, H("0x1.715476p+0")), np.full_like(x, H("0x1.8p23")))
    n = (z - f32(H("0x1.8p23"))).astype(f32)
    b = _fma(-n, np.full_like(x, H("0x1.7f7d1cp-20")), _fma(-n, np.full_like(x, H("0x1.62e4p-1")), x))
    u = (b * b).astype(f32)
    c = lambda v: np.full_like(x, v)
    j = _fma(_fma(_fma(c(H("0x1.0e4020p-7")), b, c(H("0x1.573e2ep-5"))), u, _fma(c(H("0x1.555e66p-3")), b, c(H("0x1.fffdb6p-2")))),
             u, _fma(c(H("0x1.ffffecp-1")), b, c(1.0)))
    with np.errstate(over="ignore"):   # the |n| > 192 lanes, replaced below
        out = np.ldexp(j.astype(np.float64), n.astype(np.int64)).astype(f32)
    return np.where(np.abs(n) > 192, np.where(n <= 0, f32(0), f32(np.inf)), out).astype(f32)


def test_swiglu_is_ggmls_silu():
    """silu(g) * u = g / (1 + expf(-g)) * u with ggml's expf, for SIMD lanes and the tail alike."""
    rng = np.random.default_rng(3)
    g = np.concatenate([rng.standard_normal(1000) * 6, [0.0, -0.0, 90.0, -90.0, 200.0, -200.0, 1e-30]]).astype(f32)
    u = rng.standard_normal(g.size).astype(f32)
    want = ((g / (f32(1) + _expf_ggml(-g))).astype(f32) * u).astype(f32)
    for reference in (False, True):
        got = _harness.swiglu(g, u, reference)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("lengths,window", [([37], 0), ([70, 9, 23], 0), ([40, 17], 12)])
@pytest.mark.parametrize("hd", [64, 256])
@pytest.mark.parametrize("kernel", [1, 2], ids=["avx2", "avx512"])
def test_attention_llamacpp_fast_equals_reference(lengths, window, hd, kernel):
    """AVX2 and AVX-512 paths vs the scalar statement of llama.cpp's order, for batches of one
    query row (vec_dot_f16 order) and of several (tinyBLAS order), GQA, sliding windows."""
    if not (_harness.attention_avx2_available() if kernel == 1 else _harness.attention_avx512_available()):
        pytest.skip("this CPU does not run that level")
    b = make_batch(lengths, n_head=4, n_head_kv=2, hd=hd, seed=hd)
    rows_all = np.arange(len(b.positions), dtype=np.int32)
    for rows in (rows_all, rows_all[-1:], rows_all[5:6]):
        args = (b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, b.block_size, rows, 0.125, window)
        fast = _harness.attention_test(*args, kernel=kernel, numerics="llama.cpp")
        ref = _harness.attention_test(*args, kernel=0, numerics="llama.cpp")
        assert np.array_equal(fast.view(np.uint32), ref.view(np.uint32)), f"rows {len(rows)}"


def test_attention_llamacpp_kernel_depends_on_batch_size():
    """As in llama.cpp, a row's result may differ between a one-row and a many-row batch (the
    two kernels sum in different orders) but both are the same attention to float accuracy."""
    b = make_batch([50], n_head=2, n_head_kv=1, hd=64, seed=5)
    rows = np.arange(50, dtype=np.int32)
    args = (b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, b.block_size)
    many = _harness.attention_test(*args, rows, 0.125, numerics="llama.cpp")
    one = _harness.attention_test(*args, rows[-1:], 0.125, numerics="llama.cpp")
    fast = _harness.attention_test(*args, rows[-1:], 0.125)
    np.testing.assert_allclose(one[0], many[-1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(one[0], fast[0], rtol=0, atol=1e-5)
