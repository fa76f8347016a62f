"""The quantized KV cache (llama.cpp's --cache-type-k / --cache-type-v q8_0 / q4_0).

Attention over a quantized cache is held to a float64 reference that reads K and V through the
`gguf` package's own quantize + dequantize (an independent implementation of ggml's blocks),
after llama.cpp's Walsh-Hadamard rotation of a quantized cache (keys and queries by the largest
power of two >= 64 dividing head_dim, values by 64 and the output rotated back; none when
head_dim % 64 != 0), every kernel bit-identical to the scalar one; the memory the cache takes follows its types in
the allocator, the planner and `kv_bytes_per_token` alike; what cannot run is refused with an
error naming it. Perplexity against llama.cpp with the same cache types is in test_fidelity.py,
batch invariance and the engine's leak test with a quantized cache in test_batch_invariance.py
and test_engine.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from conftest import model_file
from localllm import LLM, _core
from localllm.engine import kv_bytes_per_token
from localllm.gguf import GGUFFile
from test_attention import KERNELS, make_batch

GGUF_TYPES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0}
PAIRS = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16"), ("f16", "q4_0")]


def hadamard(n: int) -> np.ndarray:
    """The orthonormal Walsh-Hadamard matrix, Sylvester order (llama.cpp's ggml_gen_hadamard)."""
    h = np.ones((1, 1))
    while len(h) < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def rotations(cache_k: str, cache_v: str, hd: int) -> tuple[int, int]:
    """llama.cpp's rotation sizes of K (and q) and of V (0: none)."""
    if hd % 64:
        return 0, 0
    rk = 64
    while hd % (2 * rk) == 0:
        rk *= 2
    return (rk if cache_k != "f16" else 0), (64 if cache_v != "f16" else 0)


def rotate(x: np.ndarray, n: int) -> np.ndarray:
    if not n:
        return x.astype(np.float64)
    return (x.reshape(-1, n).astype(np.float64) @ hadamard(n)).reshape(x.shape)


def stored(x: np.ndarray, cache_type: str, rot: int) -> np.ndarray:
    """The values a cache of this type holds for x [T, heads, hd] (rotated), through gguf-py."""
    x = rotate(x, rot).astype(np.float32)
    if cache_type == "f16":
        return x.astype(np.float16).astype(np.float64)
    rows = x.reshape(x.shape[0], -1)
    t = GGUF_TYPES[cache_type]
    return dequantize(quantize(rows, t), t).reshape(x.shape).astype(np.float64)


def reference(b, rows, scale, window, cache_k, cache_v, rotated: bool = True) -> np.ndarray:
    """float64 attention as test_attention.reference, over the cache's stored K and V: queries
    rotated as the keys, the output rotated back as the values were (rotated=False: the same
    cache types without rotation, which the runtime must not compute)."""
    rk, rv = rotations(cache_k, cache_v, b.q.shape[2]) if rotated else (0, 0)
    q = rotate(b.q, rk).astype(np.float32).astype(np.float16).astype(np.float64)
    k, v = stored(b.k, cache_k, rk), stored(b.v, cache_v, rv)
    group = q.shape[1] // k.shape[1]
    out = np.zeros((len(rows),) + q.shape[1:])
    for i, t in enumerate(rows):
        own = np.flatnonzero(b.seq == b.seq[t])
        pos = b.positions[t]
        keys = own[(b.positions[own] <= pos) & (b.positions[own] > (pos - window if window > 0 else -1))]
        for h in range(q.shape[1]):
            s = k[keys, h // group] @ q[t, h] * scale
            e = np.exp(s - s.max())
            p = (e / e.sum()).astype(np.float16).astype(np.float64)
            out[i, h] = p @ v[keys, h // group]
    return rotate(out, rv)


def run(b, rows, scale, window, kernel, cache_k, cache_v, n_threads=2):
    return _core.attention_test(b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, b.block_size,
                                np.asarray(rows, np.int32), scale, window, kernel, n_threads,
                                cache_type_k=cache_k, cache_type_v=cache_v)


@pytest.mark.parametrize("cache_k,cache_v", PAIRS)
@pytest.mark.parametrize("hd,n_head,n_head_kv,window", [(64, 9, 3, 0), (256, 4, 1, 23), (128, 8, 2, 0),
                                                       (96, 4, 2, 0)])
def test_attention_reads_the_quantized_values(cache_k, cache_v, hd, n_head, n_head_kv, window):
    b = make_batch([37, 1, 70, 16], n_head, n_head_kv, hd, seed=hd + window)
    rows = np.arange(len(b.seq), dtype=np.int32)
    scale = 1.0 / np.sqrt(hd)
    outs = [run(b, rows, scale, window, k, cache_k, cache_v) for k in KERNELS]
    for k, o in zip(KERNELS[1:], outs[1:]):       # every SIMD kernel bit-identical to the scalar one
        assert np.array_equal(o.view(np.uint32), outs[0].view(np.uint32)), f"kernel {k}"
    want = reference(b, rows, scale, window, cache_k, cache_v)
    err = np.abs(outs[0] - want).max()
    assert err < 1e-3 * np.abs(b.v).max(), err
    # The cache really holds the quantized values: the f16 cache's answer is further away, and
    # so is the unrotated quantized cache's where the cache rotates.
    f16_err = np.abs(reference(b, rows, scale, window, "f16", "f16") - want).max()
    assert f16_err > 3 * err, (f16_err, err)
    if hd % 64 == 0:
        unrotated = np.abs(reference(b, rows, scale, window, cache_k, cache_v, rotated=False) - want).max()
        assert unrotated > 3 * err, (unrotated, err)
