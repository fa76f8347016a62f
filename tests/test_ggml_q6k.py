"""The Q6_K matmul of the llama.cpp numerics mode (csrc/backends/cpu/ggml_numerics/ggml_q6k.cpp).

Its bit-for-bit agreement with llama.cpp is checked against llama.cpp's own tensors outside CI
(they are not in the repository); here: the SIMD kernel (AVX-512, or AVX2 on CPUs without it)
gives exactly the bits of the scalar
reference, on random blocks and on real Gemma-3 rows, on both of llama.cpp's paths (M < 8: its
vec_dot order, M >= 8: its tiled order), and the reference computes the right product.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from conftest import model_file
from localllm import _core, _harness
from localllm.gguf import GGUFFile
from test_kernels import dequant_act

Q6_K = 14
BLOCK_BYTES = 210   # per 256 elements
MS = (1, 3, 8, 13)  # both sides of llama.cpp's switch at 8 rows, and ragged 4-row tiles

fast_kernel = pytest.mark.skipif(not _core.isa_available(1), reason="no SIMD kernel here: fast path is the reference")


def random_q6k(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """n rows of random Q6_K blocks (every quant and scale byte random, sane fp16 scales)."""
    nb = k // 256
    b = rng.integers(0, 256, size=(n, nb, BLOCK_BYTES), dtype=np.uint8)
    d = (rng.uniform(1e-4, 1e-2, size=(n, nb)) * rng.choice([-1.0, 1.0], size=(n, nb))).astype(np.float16)
    b[:, :, 208:210] = d.view(np.uint8).reshape(n, nb, 2)
    return b.reshape(n, nb * BLOCK_BYTES)


def activations(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    x = rng.standard_normal((m, k)) * rng.uniform(0.05, 5.0, size=(m, 1))
    x[rng.random((m, k)) < 0.01] *= 30.0   # a few outliers, as in real FFN inputs
    return x.astype(np.float32)


def both_paths(w: np.ndarray, n: int, k: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fast = _harness.matmul_llamacpp(w, Q6_K, n, k, x, n_threads=2)
    ref = _harness.matmul_llamacpp(w, Q6_K, n, k, x, n_threads=2, reference=True)
    return fast, ref


@fast_kernel
@pytest.mark.parametrize("m", MS)
def test_fast_equals_reference_random_blocks(m):
    rng = np.random.default_rng(100 + m)
    n, k = 40, 1024
    w = random_q6k(rng, n, k)
    fast, ref = both_paths(w, n, k, activations(rng, m, k))
    assert fast.shape == (m, n)
    np.testing.assert_array_equal(fast.view(np.uint32), ref.view(np.uint32))


@pytest.fixture(scope="module")
def gemma_q6k_rows() -> tuple[np.ndarray, int]:
    """The first 48 rows of a Q6_K ffn_down of Gemma-3-270M (K = 2048) and K."""
    f = GGUFFile(str(model_file("gemma3-270m-q4_k_m")))
    t = next(t for t in f.tensors if t.name.endswith("ffn_down.weight") and int(t.type) == Q6_K)
    k = int(t.shape[0])
    raw = np.ascontiguousarray(f.tensor_data(t.name)).view(np.uint8).reshape(-1, k // 256 * BLOCK_BYTES)
    return np.ascontiguousarray(raw[:48]), k


@fast_kernel
@pytest.mark.parametrize("m", MS)
def test_fast_equals_reference_gemma_rows(gemma_q6k_rows, m):
    w, k = gemma_q6k_rows
    fast, ref = both_paths(w, w.shape[0], k, activations(np.random.default_rng(200 + m), m, k))
    np.testing.assert_array_equal(fast.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("m", MS)
def test_reference_is_the_product(gemma_q6k_rows, m):
    """Whatever the order, the result is W . x_q, x_q being x as Q8_K rounds it (the same bytes
    quantize_act gives): only f32 accumulation error is left. Each superblock's sum is an exact
    integer, then K/256 = 8 f32 multiply-adds: about 8 ulps (2^-21) of the magnitudes' sum at
    worst; measured about 1 ulp here, while zeroing 1/8 of each row is off by ~8e-5 of it."""
    w, k = gemma_q6k_rows
    x = activations(np.random.default_rng(300 + m), m, k)
    ref = _harness.matmul_llamacpp(w, Q6_K, w.shape[0], k, x, reference=True)
    wd = dequantize(w, T.Q6_K).astype(np.float64)
    for i in range(m):
        xd = dequant_act(_harness.quantize_act(x[i], int(T.Q8_K)).tobytes(), T.Q8_K, k)
        tol = 2.0 ** -21 * (np.abs(wd) @ np.abs(xd))
        assert np.all(np.abs(ref[i] - wd @ xd) <= tol), f"row {i}: {np.abs(ref[i] - wd @ xd).max()} > {tol.min()}"


def test_thread_split_changes_no_bits(gemma_q6k_rows):
    w, k = gemma_q6k_rows
    x = activations(np.random.default_rng(7), 13, k)
    one = _harness.matmul_llamacpp(w, Q6_K, w.shape[0], k, x, n_threads=1)
    np.testing.assert_array_equal(one.view(np.uint32), _harness.matmul_llamacpp(w, Q6_K, w.shape[0], k, x, n_threads=2).view(np.uint32))


def test_rejects_bad_shapes():
    w = np.zeros((2, BLOCK_BYTES), np.uint8)
    with pytest.raises(ValueError):
        _harness.matmul_llamacpp(w, Q6_K, 2, 256, np.zeros((1, 128), np.float32))
    with pytest.raises(ValueError):
        _harness.matmul_llamacpp(w, Q6_K, 3, 256, np.zeros((1, 256), np.float32))
