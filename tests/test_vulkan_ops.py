"""Every Vulkan op against the CPU reference on the same inputs: dequantization and embedding
bit-exact, float paths within normalized MSE 5e-4 (sum((a-b)^2) / sum(b^2)), on shapes that are
not multiples of the kernels' tiles. With LOCALLLM_VULKAN_VALIDATE=1 (CI) the validation layer
watches every call and any message it sends fails the test that caused it."""
from __future__ import annotations

import os

import numpy as np
import pytest

from localllm import _core, _harness
from vulkan_support import assert_no_new_validation_messages, validation_count, vulkan_device

NMSE_MAX = 5e-4
# ggml type ids the Vulkan kernels read, with the row lengths the tests use for each.
TYPES = {"F32": 0, "F16": 1, "BF16": 30, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
         "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "IQ4_XS": 23}
# Offsets of the f16 scale fields in each block (random bits there must be finite).
F16_FIELDS = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108], 12: [0, 2],
              13: [0, 2], 14: [208], 20: [0], 23: [0]}


@pytest.fixture(scope="module")
def device() -> int:
    return vulkan_device()


@pytest.fixture(autouse=True)
def no_validation_messages(device):
    if os.environ.get("LOCALLLM_VULKAN_VALIDATE", "") not in ("", "0"):
        assert _harness.vulkan_validating(), "LOCALLLM_VULKAN_VALIDATE=1 but the validation layer is off"
    before = validation_count()
    yield
    assert_no_new_validation_messages(before)


def nmse(a: np.ndarray, ref: np.ndarray) -> float:
    ref64 = ref.astype(np.float64)
    return float(np.sum((a.astype(np.float64) - ref64) ** 2) / max(np.sum(ref64 ** 2), 1e-30))


def row_lengths(t: int) -> list[int]:
    elems = _core.type_info(t)["block_elems"]
    if elems == 256:
        return [256, 512, 4864]
    if elems == 32:
        return [96, 160, 4864]
    return [33, 96, 4864]   # plain types: any length


def random_rows(rng: np.random.Generator, t: int, rows: int, K: int) -> np.ndarray:
    """[rows, row_bytes] uint8 of random blocks: random quants, finite random f16 scales (f32
    and bf16 values normal: Vulkan lets a device flush denormal f32s)."""
    info = _core.type_info(t)
    n_blocks = rows * K // info["block_elems"]
    if t == 0:
        v = (rng.standard_normal(rows * K) * 10.0 ** rng.integers(-20, 20, rows * K)).astype(np.float32)
        return v.view(np.uint8).reshape(rows, -1)
    if t in (1, 30):
        h = rng.integers(0, 0x10000, rows * K, dtype=np.uint32)
        if t == 1:
            h = np.where((h & 0x7C00) == 0x7C00, h & 0xBFFF, h)
        else:
            h = np.where((h & 0x7F80) == 0x7F80, h & 0xBFFF, h)
            h = np.where((h & 0x7F80) == 0, h | 0x0080, h)
        return h.astype(np.uint16).view(np.uint8).reshape(rows, -1)
    raw = rng.integers(0, 256, (n_blocks, info["block_bytes"]), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        h = rng.integers(0, 0x10000, n_blocks, dtype=np.uint32)
        h = np.where((h & 0x7C00) == 0x7C00, h & 0xBFFF, h).astype(np.uint16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, -1)


def quantized_weights(rng: np.random.Generator, t: int, rows: int, K: int) -> np.ndarray:
    """[rows, row_bytes] of weights as a model has them (quantized from normal floats)."""
    w = (rng.standard_normal((rows, K)) * 0.05).astype(np.float32)
    return np.ascontiguousarray(_core.quantize(w, t)).reshape(rows, -1)


@pytest.mark.parametrize("name", list(TYPES))
def test_dequantize_is_bit_exact(device, name):
    t = TYPES[name]
    rng = np.random.default_rng(t)
    for K in row_lengths(t):
        rows = 3
        raw = random_rows(rng, t, rows, K)
        cpu = _core.dequantize(raw, t, rows * K).reshape(rows, K)
        gpu = _harness.vulkan_dequantize(raw, t, rows, K, device=device)
        assert gpu.shape == (rows, K)
        diff = np.flatnonzero(cpu.view(np.uint32) != gpu.view(np.uint32))
        assert diff.size == 0, f"{name} K={K}: {diff.size} elements differ, first at {diff[0]}: " \
                               f"{gpu.flat[diff[0]]!r} vs {cpu.flat[diff[0]]!r}"


@pytest.mark.parametrize("name", ["F32", "F16", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K"])
def test_embed_is_the_dequantized_rows(device, name):
    t = TYPES[name]
    rng = np.random.default_rng(100 + t)
    rows, K = 37, row_lengths(t)[1]
    table = random_rows(rng, t, rows, K)
    ids = np.array([5, 0, 36, 5, 17], np.int32)
    gpu = _harness.vulkan_embed(table, t, rows, K, ids, device=device)
    ref = _core.dequantize(np.ascontiguousarray(table[ids]), t, len(ids) * K).reshape(len(ids), K)
    assert np.array_equal(gpu.view(np.uint32), ref.view(np.uint32))
    with pytest.raises(IndexError, match="out of range"):
        _harness.vulkan_embed(table, t, rows, K, np.array([rows], np.int32), device=device)


def linear_cases(t: int) -> list[tuple[int, int, int, str]]:
    """(T, N, K, kernel) shapes: odd N and T, both kernels, several tiles in each direction."""
    k_small, k_mid, k_big = row_lengths(t)
    return [(1, 17, k_big, "auto"), (3, 1, k_mid, "matvec"), (3, 17, k_mid, "tiled"), (4, 896, k_small, "auto"),
            (33, 17, k_big, "auto"), (70, 131, k_mid, "tiled")]


@pytest.mark.parametrize("name", list(TYPES))
def test_linear_matches_cpu(device, name):
    t = TYPES[name]
    rng = np.random.default_rng(200 + t)
    worst = 0.0
    for T, N, K, kernel in linear_cases(t):
        w = quantized_weights(rng, t, N, K) if _core.type_info(t)["can_quantize"] else random_rows(rng, t, N, K)
        x = rng.standard_normal((T, K)).astype(np.float32)
        gpu = _harness.vulkan_linear(w, t, N, K, x, kernel=kernel, device=device)
        assert gpu.shape == (T, N)
        # Against the dequantized weights in f64: only the shader's f32 sums differ.
        wf = _core.dequantize(w, t, N * K).reshape(N, K).astype(np.float64)
        exact = x.astype(np.float64) @ wf.T
        assert nmse(gpu, exact) < 1e-8, f"{name} T={T} N={N} K={K} {kernel}"
        # Against the CPU matmul (activations quantized to the weight's vec_dot_type there).
        cpu = _harness.matmul(w, t, N, K, x)
        err = nmse(gpu, np.asarray(cpu).reshape(T, N))
        worst = max(worst, err)
        assert err <= NMSE_MAX, f"{name} T={T} N={N} K={K} {kernel}: nmse {err:.3g}"
    print(f"linear {name}: max nmse vs CPU {worst:.3g}")


# The integer-dot kernel's types; for the 32-element ones the CPU's activations are q8_0/q8_1 too.
INT8_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


# (T, N, K) per kernel: the matrix-vector one takes up to 4 tokens; the tiled one's 64 x 64 tiles
# are crossed by rows and tokens that are not multiples of 64.
INT8_SHAPES = {"matvec_int8": {256: [(1, 17, 4864), (3, 5, 512), (4, 896, 256), (2, 1, 256)],
                               32: [(1, 17, 4864), (3, 5, 160), (4, 896, 96), (2, 1, 32)]},
               "tiled_int8": {256: [(5, 17, 768), (70, 67, 512), (64, 64, 256)],
                              32: [(5, 17, 160), (70, 67, 96), (64, 64, 32)]}}


@pytest.mark.parametrize("kernel", INT8_SHAPES)
@pytest.mark.parametrize("name", INT8_TYPES)
def test_linear_int8_matches_the_cpu_quantized_matmul(device, name, kernel):
    """The integer-dot kernels (matrix-vector and tiled) quantize x to q8_1 on the device and
    multiply int8 by int8. For the 32-element formats the CPU's matmul does the same (its
    vec_dot_type is q8_0/q8_1): the integer sums are the CPU's and only the order of the float sums
    over blocks differs (nmse ~1e-13 measured). The K-quants' CPU activations are q8_K (one scale
    per 256), coarser than q8_1's per 32: there both stay within q8's error of the float product."""
    if not next(d for d in _core.vulkan_devices() if d["index"] == device)["features"][
            "VK_KHR_shader_integer_dot_product"]:
        pytest.skip("the device has no shaderIntegerDotProduct")
    t = TYPES[name]
    rng = np.random.default_rng(300 + t)
    k_quant = _core.type_info(t)["block_elems"] == 256
    for T, N, K in INT8_SHAPES[kernel][_core.type_info(t)["block_elems"]]:
        w = quantized_weights(rng, t, N, K)
        x = rng.standard_normal((T, K)).astype(np.float32)
        x[0, :32] = 0.0   # an all-zero block: d = 0, no division by it
        gpu = _harness.vulkan_linear(w, t, N, K, x, kernel=kernel, device=device)
        cpu = np.asarray(_harness.matmul(w, t, N, K, x)).reshape(T, N)
        bound = NMSE_MAX if k_quant else 1e-10
        assert nmse(gpu, cpu) < bound, f"{name} {kernel} T={T} N={N} K={K}: nmse {nmse(gpu, cpu):.3g}"
        if N * K >= 4096:   # q8's error against the float product, over enough sums to average
            wf = _core.dequantize(w, t, N * K).reshape(N, K).astype(np.float64)
            assert nmse(gpu, x.astype(np.float64) @ wf.T) < 2e-4


@pytest.mark.parametrize("name", list(TYPES))
def test_a_token_gets_the_same_bits_from_either_kernel(device, name):
    """Batch invariance on every device: decode (up to 4 tokens) takes the matrix-vector kernels,
    batches on a GPU the tiled ones, so a token's outputs must not depend on which ran. Both add
    the same block sums in the same order (matvec_sums.glsl): equal bit for bit, float and
    integer-dot forms, on shapes that cross the tiles' edges."""
    t = TYPES[name]
    rng = np.random.default_rng(900 + t)
    elems = _core.type_info(t)["block_elems"]
    K = 2 * 256 if elems == 256 else (200 if elems == 1 else 160)   # F32/F16/BF16: K not a multiple of 32
    N = 67
    w = quantized_weights(rng, t, N, K)
    x = rng.standard_normal((70, K)).astype(np.float32)
    pairs = [("matvec", "tiled")]
    if name in INT8_TYPES and next(d for d in _core.vulkan_devices() if d["index"] == device)["features"][
            "VK_KHR_shader_integer_dot_product"]:
        pairs.append(("matvec_int8", "tiled_int8"))
    for one, batch in pairs:
        whole = _harness.vulkan_linear(w, t, N, K, x, kernel=batch, device=device)
        for t0, T in [(0, 1), (5, 4), (66, 4)]:
            rows = _harness.vulkan_linear(w, t, N, K, x[t0:t0 + T], kernel=one, device=device)
            assert np.array_equal(rows.view(np.uint32), whole[t0:t0 + T].view(np.uint32)), (name, one, t0, T)


def test_linear_int8_names_what_it_cannot_do(device):
    w = quantized_weights(np.random.default_rng(1), TYPES["F16"], 2, 256)
    with pytest.raises(ValueError, match="no integer-dot kernel for F16"):
        _harness.vulkan_linear(w, TYPES["F16"], 2, 256, np.zeros((1, 256), np.float32), kernel="matvec_int8",
                               device=device)
    w = quantized_weights(np.random.default_rng(1), TYPES["Q4_0"], 2, 64)
    with pytest.raises(ValueError, match="at most 4 tokens"):
        _harness.vulkan_linear(w, TYPES["Q4_0"], 2, 64, np.zeros((5, 64), np.float32), kernel="matvec_int8",
                               device=device)


def test_linear_rejects_bad_shapes(device):
    w = np.zeros((2, 18), np.uint8)
    with pytest.raises(ValueError, match="bytes given"):
        _harness.vulkan_linear(w, TYPES["Q4_0"], 3, 32, np.zeros((1, 32), np.float32), device=device)
    with pytest.raises(ValueError, match="at most 4 tokens"):
        _harness.vulkan_linear(w, TYPES["Q4_0"], 2, 32, np.zeros((5, 32), np.float32), kernel="matvec", device=device)
    with pytest.raises(ValueError, match="no kernel for type"):
        _harness.vulkan_linear(np.zeros((1, 292), np.uint8), 15, 1, 256, np.zeros((1, 256), np.float32), device=device)


def test_allocation_too_big_names_the_tensor(device):
    d = _core.vulkan_devices()[device]
    limit = min(d["max_storage_buffer_range"], 1 << 30)
    K = 1024
    rows = limit // (K * 4) + 1   # the f32 output is one row over the limit; the Q4_0 input is 1/7 of it
    w = np.zeros((rows, K // 32 * 18), np.uint8)
    with pytest.raises(ValueError, match="dequantize output.*exceeds"):
        _harness.vulkan_dequantize(w, TYPES["Q4_0"], rows, K, device=device)


@pytest.mark.parametrize("rows,n", [(1, 896), (3, 17), (5, 4864)])
def test_rms_norm(device, rows, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    gpu = _harness.vulkan_rms_norm(x, w, 1e-6, device=device)
    ref = np.stack([_harness.rms_norm(x[r], w, 1e-6) for r in range(rows)])
    assert nmse(gpu, ref) <= NMSE_MAX
    assert nmse(gpu, ref) < 1e-10   # f32 sum of squares against the CPU's double one
    unweighted = _harness.vulkan_rms_norm(x, None, 1e-6, device=device)
    ref1 = np.stack([_harness.rms_norm(x[r], np.ones(n, np.float32), 1e-6) for r in range(rows)])
    assert nmse(unweighted, ref1) < 1e-10


@pytest.mark.parametrize("style", ["normal", "neox"])
@pytest.mark.parametrize("T,heads,head_dim,rope_dims", [(1, 14, 64, 64), (33, 3, 96, 64), (3, 2, 128, 128)])
def test_rope(device, style, T, heads, head_dim, rope_dims):
    rng = np.random.default_rng(T * heads)
    x = rng.standard_normal((T, heads, head_dim)).astype(np.float32)
    pos = (np.arange(T, dtype=np.int32) * 37 + 5).astype(np.int32)
    gpu = _harness.vulkan_rope(x, pos, rope_dims, 1e6, style, device=device)
    ref = _harness.rope_cpu(x, pos, rope_dims, 1e6, style)
    assert np.array_equal(gpu[:, :, rope_dims:], x[:, :, rope_dims:])
    assert nmse(gpu, ref) < 1e-12


@pytest.mark.parametrize("kind", ["silu", "gelu"])
def test_glu(device, kind):
    rng = np.random.default_rng(7)
    n = 4864 * 3 + 5
    gate = (rng.standard_normal(n) * 4).astype(np.float32)
    gate[:4] = [-12.0, 12.0, -10.0, 0.0]
    up = rng.standard_normal(n).astype(np.float32)
    gpu = _harness.vulkan_glu(gate, up, kind, device=device)
    ref = (_harness.swiglu if kind == "silu" else _harness.geglu)(gate, up)
    err = nmse(gpu, ref)
    assert err <= NMSE_MAX
    assert err < (1e-10 if kind == "silu" else 1e-6)   # gelu: f16 table rounding on both sides


def test_add_and_scale(device):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 896)).astype(np.float32)
    b = rng.standard_normal((7, 896)).astype(np.float32)
    bias = rng.standard_normal(896).astype(np.float32)
    assert np.array_equal(_harness.vulkan_add(a, b, device=device), a + b)
    assert np.array_equal(_harness.vulkan_add(a, bias, device=device), a + bias)
    assert np.array_equal(_harness.vulkan_scale(a, 0.125, device=device), a * np.float32(0.125))
    with pytest.raises(ValueError, match="divide"):
        _harness.vulkan_add(a, np.ones(5, np.float32), device=device)
