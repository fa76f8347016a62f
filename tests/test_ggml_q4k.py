"""Q4_K matmul in llama.cpp's float order (csrc/backends/cpu/ggml_numerics/ggml_q4k.cpp).

Bit-identity with llama.cpp itself is checked against its captured intermediate tensors, which
CI does not have. Here: the SIMD path equals the scalar reference bit for bit (random rows,
extreme rows, real Gemma rows), for batch sizes that exercise ggml's 4-row gemm tiles, its gemv
leftovers and decode; the rows are split between the two kernels as ggml splits them; shapes
llama.cpp does not repack (N % 8 != 0) are refused.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import model_file
from localllm import _harness
from localllm.gguf import GGUFFile

Q4_K = 12
BLOCK_BYTES = 144          # d, dmin (f16), 12 bytes of scales, 128 bytes of nibbles
M_VALUES = (1, 3, 4, 7, 13)


def random_q4k_rows(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n, row_bytes]: random scales and nibbles (any bit pattern is valid), sane f16 d / dmin."""
    raw = rng.integers(0, 256, size=(n * k // 256, BLOCK_BYTES), dtype=np.uint8)
    raw[:, 0:4] = rng.uniform(0.002, 0.05, size=(raw.shape[0], 2)).astype(np.float16).view(np.uint8)
    return raw.reshape(n, -1)


def activations(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((m, k)).astype(np.float32)
    idx = rng.integers(0, k, size=(m, max(1, k // 128)))
    np.put_along_axis(x, idx, rng.uniform(-20, 20, size=idx.shape).astype(np.float32), axis=1)
    if m > 2:
        x[1, :256] = 0.0       # an all-zero Q8_K block (d = 0)
    return x


def both_paths(w: np.ndarray, x: np.ndarray, n_threads: int = 2) -> tuple[np.ndarray, np.ndarray]:
    n, k = w.shape[0], x.shape[1]
    fast = _harness.matmul_llamacpp(w, Q4_K, n, k, x, n_threads)
    ref = _harness.matmul_llamacpp(w, Q4_K, n, k, x, n_threads, reference=True)
    assert fast.shape == ref.shape == (x.shape[0], n)
    return fast, ref


def assert_bits_equal(a: np.ndarray, b: np.ndarray) -> None:
    diff = a.view(np.uint32) != b.view(np.uint32)
    assert not diff.any(), f"{int(diff.sum())} of {diff.size} outputs differ, first at {np.argwhere(diff)[0]}"


@pytest.mark.parametrize("m", M_VALUES)
def test_random_rows_fast_equals_reference(m):
    rng = np.random.default_rng(100 + m)
    w = random_q4k_rows(40, 768, rng)          # 40 rows: two 16-row panels and a half one
    x = activations(m, 768, rng)
    fast, ref = both_paths(w, x)
    assert_bits_equal(fast, ref)
    assert np.isfinite(ref).all()


@pytest.mark.parametrize("m", M_VALUES)
def test_extreme_rows_fast_equals_reference(m):
    """All scales, mins and nibbles at their maximum and same-sign activations: the gemv's sum
    of eight sub-blocks passes 2^24, where its conversion to float rounds."""
    rng = np.random.default_rng(200 + m)
    w = random_q4k_rows(24, 512, rng)
    w.reshape(-1, BLOCK_BYTES)[::2, 4:] = 0xFF
    x = (1.0 + 0.01 * rng.standard_normal((m, 512))).astype(np.float32)
    fast, ref = both_paths(w, x)
    assert_bits_equal(fast, ref)


@pytest.fixture(scope="module")
def gemma_q4k() -> list[np.ndarray]:
    """The first Q4_K matrix of each row length in the Gemma file (attn_output, ffn_down)."""
    f = GGUFFile(model_file("gemma3-270m-q4_k_m"))
    by_k: dict[int, np.ndarray] = {}
    for t in f.tensors:
        if t.type == Q4_K and t.shape[0] not in by_k:
            by_k[t.shape[0]] = f.tensor_data(t.name)
    assert len(by_k) >= 2
    return list(by_k.values())


@pytest.mark.parametrize("m", M_VALUES)
def test_gemma_rows_fast_equals_reference(gemma_q4k, m):
    rng = np.random.default_rng(300 + m)
    for w in gemma_q4k:
        k = w.shape[1] // BLOCK_BYTES * 256
        fast, ref = both_paths(w, activations(m, k, rng))
        assert_bits_equal(fast, ref)


@pytest.mark.parametrize("reference", [False, True])
def test_rows_split_between_gemm_and_gemv_as_ggml(reference):
    """M >= 4: rows [0, M - M % 4) take the gemm's order, the rest the gemv's; M < 4: all gemv.
    A row's result depends only on its weight row and on which of the two it takes."""
    rng = np.random.default_rng(7)
    w = random_q4k_rows(32, 1024, rng)
    x = activations(7, 1024, rng)
    run = lambda xs: _harness.matmul_llamacpp(w, Q4_K, 32, 1024, np.ascontiguousarray(xs), 2, reference)
    y7 = run(x)
    assert_bits_equal(y7[:4], run(x[:4]))                                  # gemm rows
    for i in range(4, 7):
        assert_bits_equal(y7[i:i + 1], run(x[i:i + 1]))                    # gemv rows
    # The two orders really differ on these rows: the split is observable.
    assert (run(x[:1]).view(np.uint32) != y7[:1].view(np.uint32)).any()


def test_thread_count_changes_no_bits():
    rng = np.random.default_rng(11)
    w = random_q4k_rows(48, 512, rng)
    x = activations(13, 512, rng)
    one = _harness.matmul_llamacpp(w, Q4_K, 48, 512, x, 1)
    assert_bits_equal(one, _harness.matmul_llamacpp(w, Q4_K, 48, 512, x, 3))


@pytest.mark.parametrize("reference", [False, True])
def test_rows_not_multiple_of_8_refused(reference):
    rng = np.random.default_rng(3)
    w = random_q4k_rows(12, 256, rng)
    with pytest.raises(ValueError, match="no llama.cpp-order kernel for Q4_K weights of 12 rows"):
        _harness.matmul_llamacpp(w, Q4_K, 12, 256, activations(4, 256, rng), 2, reference)
