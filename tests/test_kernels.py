"""Kernel tests: activation quantization, dot products at every ISA level, matmul.

References are independent of the C++ code under test:
  * activation quantization: a numpy re-implementation of ggml's x86 quantize_row_q8_0 / q8_1
    (inverse scale 127/amax, round half to even), of quantize_row_q8_K_ref, and numpy's f16 /
    gguf-py's bf16 conversions;
  * weights: gguf-py's quantize / dequantize (legacy types), random blocks with sane scales and
    real model tensors (K-quants), dequantized with gguf-py;
  * dot products and matmul: float64 numpy on the dequantized operands.
Every SIMD level is held to the scalar reference; the scalar reference is held to float64.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

from conftest import model_file
from localllm import _core, _harness

LEVELS = _core.isa_levels()   # this architecture's: scalar, avx2, avx512 or scalar, neon, dotprod, i8mm
ISAS = [i for i in LEVELS if _core.isa_available(i)]
SCALAR, AVX2, AVX512, NEON, DOTPROD, I8MM = 0, 1, 2, 3, 4, 5
LEGACY = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
FLOATS = [T.F32, T.F16, T.BF16]
IQ4 = [T.IQ4_NL, T.IQ4_XS]
ALL_TYPES = LEGACY + KQUANTS + FLOATS + IQ4
VEC_DOT_TYPE = {T.Q4_0: T.Q8_0, T.Q5_0: T.Q8_0, T.Q8_0: T.Q8_0, T.Q4_1: T.Q8_1, T.Q5_1: T.Q8_1,
                **{t: T.Q8_K for t in KQUANTS}, **{t: t for t in FLOATS},
                T.IQ4_NL: T.Q8_0, T.IQ4_XS: T.Q8_K}
# Types whose SIMD levels must have their own kernels (not fall back to the scalar reference).
MUST_HAVE_SIMD = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K, T.F16, T.F32]
# Known fallbacks: {type: {requested level: level actually used}}; every other pair is served
# by its own level. IQ4_NL / IQ4_XS have scalar and AVX2 kernels; AVX-512 runs the AVX2 ones.
# On aarch64 the float rows have no dotprod or i8mm form (Neon's run), the K-quants no i8mm one
# (dotprod's run), and the types beyond the reference models' run the scalar reference.
FALLBACKS: dict[T, dict[int, int]] = {
    T.F32: {DOTPROD: NEON, I8MM: NEON}, T.F16: {DOTPROD: NEON, I8MM: NEON},
    T.Q4_K: {I8MM: DOTPROD}, T.Q6_K: {I8MM: DOTPROD},
    **{t: {NEON: SCALAR, DOTPROD: SCALAR, I8MM: SCALAR}
       for t in [T.Q5_1, T.Q2_K, T.Q3_K, T.Q5_K, T.BF16]},
    # Both architectures' fallbacks in one entry: a second key for the type would replace the first.
    **{t: {AVX512: AVX2, NEON: SCALAR, DOTPROD: SCALAR, I8MM: SCALAR} for t in [T.IQ4_NL, T.IQ4_XS]},
}

F16_EPS = 2.0 ** -11   # unit roundoff of fp16
BF16_EPS = 2.0 ** -8


# ---------------------------------------------------------------------------------------------
# independent numpy references for the activation formats
# ---------------------------------------------------------------------------------------------

def ref_quantize_act(x: np.ndarray, vdt: T) -> bytes:
    """ggml's x86 CPU-backend activation quantization of one row, in numpy."""
    x = np.asarray(x, dtype=np.float32)
    if vdt == T.F32:
        return x.tobytes()
    if vdt == T.F16:
        with np.errstate(over="ignore"):
            return x.astype(np.float16).tobytes()
    if vdt == T.BF16:
        return quantize(x, T.BF16).tobytes()
    if vdt in (T.Q8_0, T.Q8_1):
        b = x.reshape(-1, 32)
        amax = np.abs(b).max(axis=1, keepdims=True)
        d = (amax / np.float32(127)).astype(np.float32)
        with np.errstate(divide="ignore"):
            inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = np.rint((b * inv).astype(np.float32)).astype(np.int32)   # rint: half to even
        head = [d.astype(np.float16).view(np.uint8)]
        if vdt == T.Q8_1:
            s = (d[:, 0] * q.sum(axis=1).astype(np.float32)).astype(np.float16)
            head.append(s.reshape(-1, 1).view(np.uint8))
        return np.concatenate(head + [q.astype(np.int8).view(np.uint8)], axis=1).tobytes()
    if vdt == T.Q8_K:
        out = []
        for b in x.reshape(-1, 256):
            a = np.abs(b)
            if a.max() == 0:
                out.append(np.zeros(4 + 256 + 32, np.uint8))
                continue
            mx = b[int(np.argmax(a))]                   # first element of largest magnitude
            iscale = np.float32(-127) / mx
            q = np.minimum(np.rint((iscale * b).astype(np.float32)), 127).astype(np.int8)
            bsums = q.astype(np.int32).reshape(16, 16).sum(axis=1).astype(np.int16)
            d = np.float32(1) / iscale
            out.append(np.concatenate([np.array([d], np.float32).view(np.uint8), q.view(np.uint8),
                                       bsums.view(np.uint8)]))
        return np.concatenate(out).tobytes()
    raise ValueError(vdt)


def dequant_act(raw: bytes, vdt: T, n: int) -> np.ndarray:
    """Values an activation row stands for (float64), from its raw bytes."""
    a = np.frombuffer(raw, np.uint8)
    if vdt in (T.F32, T.F16, T.BF16):
        return dequantize(a, vdt).astype(np.float64) if vdt != T.F32 else a.view(np.float32).astype(np.float64)
    if vdt == T.Q8_0:
        b = a.reshape(-1, 34)
        return (b[:, :2].copy().view(np.float16).astype(np.float64) * b[:, 2:].view(np.int8)).reshape(n)
    if vdt == T.Q8_1:
        b = a.reshape(-1, 36)
        return (b[:, :2].copy().view(np.float16).astype(np.float64) * b[:, 4:].view(np.int8)).reshape(n)
    if vdt == T.Q8_K:
        b = a.reshape(-1, 292)
        return (b[:, :4].copy().view(np.float32).astype(np.float64) * b[:, 4:260].view(np.int8)).reshape(n)
    raise ValueError(vdt)


def q8_1_s_term_bound(w_raw: np.ndarray, wtype: T, x_raw: bytes) -> float:
    """Q4_1/Q5_1 . Q8_1 use m * s with s = fp16(d * sum q): allowance for s's fp16 rounding."""
    if wtype not in (T.Q4_1, T.Q5_1):
        return 0.0
    wb = w_raw.reshape(-1, GGML_QUANT_SIZES[wtype][1])
    m = np.abs(wb[:, 2:4].copy().view(np.float16).astype(np.float64))[:, 0]
    s = np.abs(np.frombuffer(x_raw, np.uint8).reshape(-1, 36)[:, 2:4].copy().view(np.float16).astype(np.float64))[:, 0]
    return float((m * s).sum() * F16_EPS)


# ---------------------------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------------------------

def row_bytes(t: T, k: int) -> int:
    block, size = GGML_QUANT_SIZES[t]
    return k // block * size


def random_kquant_rows(t: T, n_rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random K-quant blocks (any bit pattern is a valid block) with sane f16 super-scales."""
    size = GGML_QUANT_SIZES[t][1]
    raw = rng.integers(0, 256, size=(n_rows * k // 256, size), dtype=np.uint8)
    d = rng.uniform(0.002, 0.05, size=(raw.shape[0], 2)).astype(np.float16).view(np.uint8)
    if t in (T.Q4_K, T.Q5_K):      # d, dmin first
        raw[:, 0:4] = d
    elif t == T.Q2_K:              # scales[16], qs[64], d, dmin
        raw[:, 80:84] = d
    else:                          # Q3_K / Q6_K: d is the last field
        raw[:, size - 2:] = d[:, :2]
    return raw.reshape(n_rows, -1)


def random_iq4_rows(t: T, n_rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random IQ4_NL / IQ4_XS blocks (any bit pattern is a valid block) with sane f16 scales d
    (the first field of both)."""
    elems, size = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(n_rows * k // elems, size), dtype=np.uint8)
    scale = 0.002 if t == T.IQ4_XS else 0.05 / 127   # IQ4_XS multiplies d by sub-scales up to 32
    raw[:, 0:2] = rng.uniform(0.1 * scale, scale, size=(raw.shape[0], 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(n_rows, -1)


def make_weights(t: T, n_rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n_rows, row_bytes] raw weight rows of type t."""
    if t in KQUANTS:
        return random_kquant_rows(t, n_rows, k, rng)
    if t in IQ4:
        return random_iq4_rows(t, n_rows, k, rng)
    w = (rng.standard_normal((n_rows, k)) * 0.05).astype(np.float32)
    if t == T.F32:
        return w.view(np.uint8)
    return np.ascontiguousarray(quantize(w, t)).view(np.uint8).reshape(n_rows, -1)


def dequant_weights(raw: np.ndarray, t: T, k: int) -> np.ndarray:
    if t == T.F32:
        return raw.view(np.float32).astype(np.float64).reshape(-1, k)
    return dequantize(raw, t).astype(np.float64).reshape(-1, k)


def make_acts(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Activation-like rows: normal values plus a few large outliers per row."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    idx = rng.integers(0, k, size=(m, max(1, k // 128)))
    np.put_along_axis(x, idx, rng.uniform(-20, 20, size=idx.shape).astype(np.float32), axis=1)
    return x


def read_gguf_tensors(path: Path, types: set[T], want=lambda name, k: True) -> dict[T, tuple[str, np.ndarray, int]]:
    """First tensor of each wanted type in a GGUF file: {type: (name, raw [rows, row_bytes], K)},
    among the 2-D tensors for which want(name, K) holds.

    A minimal reader (header, metadata skipped, tensor infos); gguf.GGUFReader is too slow on the
    big tokenizer vocabularies for a unit test.
    """
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(data)
    pos = 0

    def take(fmt: str):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals[0] if len(vals) == 1 else vals

    def string() -> str:
        nonlocal pos
        n = take("Q")
        s = bytes(buf[pos:pos + n]).decode("utf-8", "replace")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip_value(vt: int) -> object:
        nonlocal pos
        if vt in scalar:
            return take(scalar[vt])
        if vt == 8:
            return string()
        et, count = take("I"), take("Q")
        if et in scalar:
            pos += count * struct.calcsize(scalar[et])
        else:
            for _ in range(count):
                skip_value(et)
        return None

    assert bytes(buf[:4]) == b"GGUF"
    pos = 4
    _version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key, vt = string(), take("I")
        value = skip_value(vt)
        if key == "general.alignment":
            alignment = int(value)
    infos = []
    for _ in range(n_tensors):
        name, nd = string(), take("I")
        dims = [take("Q") for _ in range(nd)]
        infos.append((name, dims, T(take("I")), take("Q")))
    base = (pos + alignment - 1) // alignment * alignment
    found = {}
    for name, dims, t, off in infos:
        if t in types and t not in found and len(dims) == 2 and want(name, dims[0]):
            k, rows = dims
            rb = row_bytes(t, k)
            found[t] = (name, np.asarray(data[base + off: base + off + rows * rb]).reshape(rows, rb), k)
    return found


@pytest.fixture(scope="module")
def model_rows() -> dict[T, tuple[str, np.ndarray, int]]:
    """A few rows of one real tensor per weight type present in the test models."""
    rows: dict[T, tuple[str, np.ndarray, int]] = {}
    for key in ("smollm2-135m-q4_1", "gemma3-270m-q4_k_m"):
        for t, (name, raw, k) in read_gguf_tensors(model_file(key), set(ALL_TYPES)).items():
            if t not in rows:
                rows[t] = (f"{key}:{name}", np.ascontiguousarray(raw[:8]), k)
    return rows


# ---------------------------------------------------------------------------------------------
# ISA probing
# ---------------------------------------------------------------------------------------------

def test_isa_levels() -> None:
    """The levels of this architecture are available from scalar up to the best one, each
    including the ones before it; the other architecture's levels never are."""
    assert LEVELS in ([SCALAR, AVX2, AVX512], [SCALAR, NEON, DOTPROD, I8MM])
    assert _core.isa_available(0)
    best = _core.best_isa()
    assert best in LEVELS and _core.isa_available(best)
    rank = LEVELS.index(best)
    assert all(_core.isa_available(i) for i in LEVELS[:rank + 1])
    assert not any(_core.isa_available(i) for i in LEVELS[rank + 1:])
    assert not any(_core.isa_available(i) for i in range(6) if i not in LEVELS)
    assert [_core.isa_name(i) for i in range(6)] == ["scalar", "avx2", "avx512", "neon", "dotprod", "i8mm"]
    assert not _core.isa_available(6) and not _core.isa_available(-1)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_isa_fallbacks(t: T, isa: int) -> None:
    """Which level implements each type: the required types have their own SIMD kernels at
    every level; the documented fallbacks (FALLBACKS) report the lower level they use."""
    level = _harness.vec_dot_isa(int(t), isa)
    assert level == FALLBACKS.get(t, {}).get(isa, isa), f"{t.name} at {_core.isa_name(isa)} uses {_core.isa_name(level)}"
    if t in MUST_HAVE_SIMD and isa != SCALAR:
        assert level != SCALAR


# ---------------------------------------------------------------------------------------------
# (b) activation quantization: identical bytes at every level, equal to the numpy reference
# ---------------------------------------------------------------------------------------------

def act_test_rows(rng: np.random.Generator) -> list[np.ndarray]:
    k = 768
    rows = [make_acts(1, k, rng)[0], (rng.standard_normal(k) * 1e-3).astype(np.float32),
            np.zeros(k, np.float32)]
    # exact ties: block max 127 and half-integers -> x * (127 / amax) lands on .5 values
    ties = (rng.integers(-254, 255, size=k) / 2).astype(np.float32)
    ties[::32] = 127.0
    rows.append(ties)
    mixed = make_acts(1, k, rng)[0]
    mixed[32:64] = 0.0                                   # an all-zero 32-block
    mixed[256:512] = 0.0                                 # an all-zero Q8_K super-block
    mixed[600] = -mixed[600:700].__abs__().max() - 1.0   # negative max magnitude
    mixed[601] = -mixed[600]                             # tie of magnitudes: first one wins
    rows.append(mixed)
    return rows


@pytest.mark.parametrize("vdt", [T.Q8_0, T.Q8_1, T.Q8_K, T.F16, T.BF16, T.F32], ids=lambda t: t.name)
def test_quantize_act_matches_reference(vdt: T) -> None:
    rng = np.random.default_rng(1)
    for x in act_test_rows(rng):
        want = ref_quantize_act(x, vdt)
        for isa in ISAS:
            got = _harness.quantize_act(x, int(vdt), isa).tobytes()
            assert got == want, f"{vdt.name} at {_core.isa_name(isa)} differs from the reference"


@pytest.mark.parametrize("vdt", [T.F16, T.BF16], ids=lambda t: t.name)
def test_quantize_act_float_specials(vdt: T) -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 65504.0, 65519.0, 65520.0,
                  1e6, 5.96e-8, 2.98e-8, 3.0e-8, 1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 3.4e38] * 2, np.float32)
    want = ref_quantize_act(x, vdt)
    for isa in ISAS:
        assert _harness.quantize_act(x, int(vdt), isa).tobytes() == want


# ---------------------------------------------------------------------------------------------
# (a) dot products: scalar vs float64, every SIMD level vs scalar
# ---------------------------------------------------------------------------------------------

def lengths(t: T) -> list[int]:
    if t in KQUANTS or t == T.IQ4_XS:
        return [256, 768, 2816, 4096]
    if t in LEGACY or t == T.IQ4_NL:
        return [32, 96, 224, 1184, 4096, 32 * 129]      # odd block counts: ragged SIMD tails
    return [1, 7, 33, 100, 1003, 4096]


def check_dots(t: T, w_rows: np.ndarray, k: int, x_rows: np.ndarray, label: str) -> None:
    vdt = VEC_DOT_TYPE[t]
    wd = dequant_weights(w_rows, t, k)
    for i, x in enumerate(x_rows):
        xq = _harness.quantize_act(x, int(vdt), 0)
        xd = dequant_act(xq.tobytes(), vdt, k)
        w = w_rows[i % len(w_rows)]
        terms = wd[i % len(w_rows)] * xd
        scale = float(np.abs(terms).sum()) + 1e-30
        slack = q8_1_s_term_bound(w, t, xq.tobytes())
        ref = _harness.vec_dot(int(t), w, xq, k, 0)
        assert abs(ref - terms.sum()) <= 1e-5 * scale + slack, f"scalar {label} K={k}: {ref} vs {terms.sum()}"
        for isa in ISAS[1:]:
            got = _harness.vec_dot(int(t), w, xq, k, isa)
            assert abs(got - ref) <= 1e-5 * scale, f"{_core.isa_name(isa)} {label} K={k}: {got} vs scalar {ref}"


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_vec_dot_random(t: T) -> None:
    rng = np.random.default_rng(int(t) + 10)
    for k in lengths(t):
        check_dots(t, make_weights(t, 3, k, rng), k, make_acts(3, k, rng), "random")


@pytest.mark.parametrize("t", [T.Q4_1, T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_vec_dot_model_rows(t: T, model_rows) -> None:
    if t not in model_rows:
        pytest.skip(f"no {t.name} 2-D tensor in the test models")
    name, raw, k = model_rows[t]
    rng = np.random.default_rng(7)
    check_dots(t, raw, k, make_acts(4, k, rng), name)


@pytest.mark.parametrize("t", IQ4, ids=lambda t: t.name)
def test_vec_dot_iq4_real_weight_rows(t: T) -> None:
    """Real IQ4 rows: SmolLM2's ffn_down weights (K = 1536) quantized to IQ4 by our quantizer
    (held to llama.cpp's bytes in test_quants.py), as llama-quantize would write them."""
    from localllm import quants
    key = "smollm2-135m-q4_1"
    found = read_gguf_tensors(model_file(key), set(ALL_TYPES), lambda name, k: "ffn_down" in name)
    src_t, (name, raw, k) = next(iter(found.items()))
    w = quants.quantize(dequantize(np.ascontiguousarray(raw[:8]), src_t).reshape(-1, k), int(t))
    rng = np.random.default_rng(8)
    check_dots(t, w, k, make_acts(4, k, rng), f"{key}:{name} as {t.name}")


# ---------------------------------------------------------------------------------------------
# (c) matmul against float64
# ---------------------------------------------------------------------------------------------

def act_error_bound(x: np.ndarray, vdt: T) -> np.ndarray:
    """Worst-case |x - x_hat| per element for the activation format (x: [M, K])."""
    x = x.astype(np.float64)
    if vdt in (T.Q8_0, T.Q8_1):
        amax = np.repeat(np.abs(x.reshape(x.shape[0], -1, 32)).max(axis=2), 32, axis=1)
        d = amax / 127
        # half a step, plus the fp16 rounding of d applied to |q| <= 127, plus 1 ulp slack
        return d * (0.5 + 127 * F16_EPS) * (1 + 1e-6)
    if vdt == T.Q8_K:
        amax = np.repeat(np.abs(x.reshape(x.shape[0], -1, 256)).max(axis=2), 256, axis=1)
        return amax / 127 * 0.5 * (1 + 1e-6)
    if vdt == T.F16:
        return np.abs(x) * F16_EPS + 2.0 ** -25
    if vdt == T.BF16:
        return np.abs(x) * BF16_EPS
    return np.zeros_like(x)


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_matmul_vs_float64(t: T) -> None:
    """|Y - W_hat @ X^T| <= sum_k |W_hat[n, k]| * delta[m, k] + 1e-5 * sum_k |W_hat x|: a bound,
    not an estimate — delta is the worst-case activation quantization error (half a step plus
    fp16 scale rounding for Q8_0/Q8_1, half a step for Q8_K, 2^-11 / 2^-8 relative for F16 /
    BF16), 1e-5 covers f32 accumulation over <= 4096 terms, and Q4_1/Q5_1 add the fp16
    rounding of Q8_1's s. A tight check against the exactly dequantized activations follows."""
    rng = np.random.default_rng(int(t) + 100)
    n, k, m = 45, 512, 5
    w = make_weights(t, n, k, rng)
    wd = dequant_weights(w, t, k)
    x = make_acts(m, k, rng)
    vdt = VEC_DOT_TYPE[t]
    for isa in ISAS:
        y = _harness.matmul(w, int(t), n, k, x, 2, isa)
        assert y.shape == (m, n) and y.dtype == np.float32
        ref = x.astype(np.float64) @ wd.T
        absprod = np.abs(x.astype(np.float64)) @ np.abs(wd).T
        bound = act_error_bound(x, vdt) @ np.abs(wd).T + 1e-5 * absprod
        if t in (T.Q4_1, T.Q5_1):
            bound += absprod * 2 * F16_EPS + 1e-6
        assert np.all(np.abs(y - ref) <= bound), f"{t.name} {_core.isa_name(isa)}: max err {np.abs(y - ref).max()}"
        # tight: against the activations as quantized
        for i in range(m):
            xq = _harness.quantize_act(x[i], int(vdt), isa)
            xd = dequant_act(xq.tobytes(), vdt, k)
            exact = wd @ xd
            tol = 1e-5 * (np.abs(wd) @ np.abs(xd)) + np.array(
                [q8_1_s_term_bound(w[j], t, xq.tobytes()) for j in range(n)])
            assert np.all(np.abs(y[i] - exact) <= tol), f"{t.name} {_core.isa_name(isa)} row {i}"


# ---------------------------------------------------------------------------------------------
# (d) batch invariance, (e) thread invariance, tile == vec_dot
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_batch_invariance(t: T) -> None:
    rng = np.random.default_rng(int(t) + 200)
    n, k = 37, 512
    w = make_weights(t, n, k, rng)
    x = make_acts(16, k, rng)
    for isa in ISAS:
        full = _harness.matmul(w, int(t), n, k, x, 2, isa)
        for mm in (1, 3, 7):
            for start in sorted({0, 1, 16 - mm, 5 % (17 - mm)}):
                part = _harness.matmul(w, int(t), n, k, x[start:start + mm], 2, isa)
                assert np.array_equal(part, full[start:start + mm]), f"{_core.isa_name(isa)} M={mm} at {start}"
        perm = rng.permutation(16)
        assert np.array_equal(_harness.matmul(w, int(t), n, k, x[perm], 2, isa), full[perm])
        # every output equals the 1 x 1 kernel
        for i in (0, 9, 15):
            xq = _harness.quantize_act(x[i], int(VEC_DOT_TYPE[t]), isa)
            dots = np.array([_harness.vec_dot(int(t), w[j], xq, k, isa) for j in range(n)], np.float32)
            assert np.array_equal(dots, full[i]), f"{_core.isa_name(isa)} row {i} differs from vec_dot"


@pytest.mark.parametrize("t", [T.Q4_0, T.Q8_0, T.Q4_K, T.Q6_K, T.F16], ids=lambda t: t.name)
def test_thread_invariance(t: T) -> None:
    rng = np.random.default_rng(int(t) + 300)
    n, k = 203, 1024
    w = make_weights(t, n, k, rng)
    x = make_acts(9, k, rng)
    for isa in ISAS:
        y1 = _harness.matmul(w, int(t), n, k, x, 1, isa)
        for threads in (2, 3):
            assert np.array_equal(_harness.matmul(w, int(t), n, k, x, threads, isa), y1)


@pytest.mark.parametrize("t", [T.F16, T.BF16], ids=lambda t: t.name)
def test_float_batches_keep_the_bits_of_one_row(t: T) -> None:
    """F16 / BF16 matmuls run as units of (activation block, 16 weight rows) that the threads take
    from a shared counter (matmul_tile_jobs in matmul.cpp): every result must equal the 1 x 1
    kernel, for 1-16 activation rows (a short text's tokens), K off the SIMD width, weight rows
    that end inside a tile and a run, two activation blocks (70 rows) and 1-3 threads."""
    rng = np.random.default_rng(int(t) + 400)
    n = 37
    for k in (100, 392, 1003):
        w = make_weights(t, n, k, rng)
        x = make_acts(70, k, rng)
        for isa in ISAS:
            full = _harness.matmul(w, int(t), n, k, x, 2, isa)
            for mm in range(1, 17):
                part = _harness.matmul(w, int(t), n, k, x[:mm], 2, isa)
                assert np.array_equal(part, full[:mm]), f"{_core.isa_name(isa)} K={k} M={mm}"
            for threads in (1, 3):
                assert np.array_equal(_harness.matmul(w, int(t), n, k, x, threads, isa), full)
            for i in (0, 3, 15, 31, 69):
                xq = _harness.quantize_act(x[i], int(t), isa)
                dots = np.array([_harness.vec_dot(int(t), w[j], xq, k, isa) for j in range(n)], np.float32)
                assert np.array_equal(dots, full[i]), f"{_core.isa_name(isa)} K={k} row {i}"


def test_iq4_nl_prompts_keep_the_bits_of_decode() -> None:
    """IQ4_NL prompts (5+ activation rows a unit: dot_avx2.cpp's IQ4NLPanel, 8-row panels in
    chunks of 8 blocks, units of up to 256 activation rows) give each row the bits decode gives it
    (one activation row: the 2 x 1 tiles) and vec_dot, and stay within the float64 bound: weight
    rows ending inside a panel and a run (N = 45, 7), K of 1, 13 and 28 blocks (chunks cut and
    uncut), 5 rows (the fewest a unit takes), 70, and 300 (a second unit of 44 rows), 1-3
    threads."""
    t = T.IQ4_NL
    rng = np.random.default_rng(500)
    for n, k, m in ((45, 416, 70), (7, 32, 5), (45, 896, 300)):
        w = make_weights(t, n, k, rng)
        wd = dequant_weights(w, t, k)
        x = make_acts(m, k, rng)
        for isa in ISAS:
            full = _harness.matmul(w, int(t), n, k, x, 2, isa)
            for threads in (1, 3):
                assert np.array_equal(_harness.matmul(w, int(t), n, k, x, threads, isa), full)
            for i in sorted({0, 1, m // 2, m - 1}):
                one = _harness.matmul(w, int(t), n, k, x[i:i + 1], 2, isa)
                assert np.array_equal(one[0], full[i]), f"{_core.isa_name(isa)} N={n} K={k} M={m} row {i}"
                xq = _harness.quantize_act(x[i], int(T.Q8_0), isa)
                dots = np.array([_harness.vec_dot(int(t), w[j], xq, k, isa) for j in range(n)], np.float32)
                assert np.array_equal(dots, full[i]), f"{_core.isa_name(isa)} N={n} K={k} row {i} vs vec_dot"
                xd = dequant_act(xq.tobytes(), T.Q8_0, k)
                assert np.all(np.abs(full[i] - wd @ xd) <= 1e-5 * (np.abs(wd) @ np.abs(xd))), f"row {i}"


# ---------------------------------------------------------------------------------------------
# (f) bad input
# ---------------------------------------------------------------------------------------------

def test_bad_sizes_raise_value_error() -> None:
    rng = np.random.default_rng(5)
    k, n = 64, 4
    w = make_weights(T.Q4_0, n, k, rng)
    x = make_acts(2, k, rng)
    _harness.matmul(w, int(T.Q4_0), n, k, x)   # the valid call works
    bad_calls = [
        lambda: _harness.matmul(w[:, :-1].copy(), int(T.Q4_0), n, k, x),         # short rows
        lambda: _harness.matmul(w, int(T.Q4_0), n + 1, k, x),                     # N too big
        lambda: _harness.matmul(w, int(T.Q4_0), n, 48, x[:, :48].copy()),         # K not a multiple of 32
        lambda: _harness.matmul(w, int(T.Q4_0), n, k, x[:, :32].copy()),          # x has the wrong K
        lambda: _harness.matmul(w, int(T.Q4_0), n, k, x[0]),                      # x not 2-D
        lambda: _harness.matmul(w, 4, n, k, x),                                   # unknown type id
        lambda: _harness.matmul(w, int(T.Q8_K), n, k, x),                         # no dot product
        lambda: _harness.matmul(w, int(T.Q4_0), n, k, x, 0),                      # n_threads
        lambda: _harness.matmul(w, int(T.Q4_0), n, k, x, 2, 7),                   # isa
        lambda: _harness.matmul(w.view(np.int8), int(T.Q4_0), n, k, x),           # not uint8
        lambda: _harness.vec_dot(int(T.Q4_0), w[0], _harness.quantize_act(x[0], int(T.Q8_0)), 32),
        lambda: _harness.vec_dot(int(T.Q4_0), w[0], _harness.quantize_act(x[0, :32], int(T.Q8_0)), k),
        lambda: _harness.quantize_act(x[0, :40], int(T.Q8_0)),                   # n not a multiple
        lambda: _harness.quantize_act(x[0], int(T.Q8_K)),                         # 64 < 256
        lambda: _harness.quantize_act(x[0], int(T.Q4_0)),                         # not an activation type
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises(ValueError):
            call()
            pytest.fail(f"bad call #{i} did not raise")


# ---------------------------------------------------------------------------------------------
# thread pool and measurement helpers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_thread_pool_runs_every_share_once(threads: int) -> None:
    """threadpool_dispatch_ns checks after every run that each share ran exactly once and had
    finished when run() returned (it raises otherwise); with busy shares the caller may take
    over a late worker's share (still exactly once). A run lasts at least its shares' work, so
    the overhead (wall time per run minus the work) is never negative."""
    for work_ns in (0.0, 2000.0):
        overhead = _harness.threadpool_dispatch_ns(threads, 200, work_ns)
        assert np.isfinite(overhead) and overhead >= 0.0


def test_read_bandwidth_is_gb_per_second() -> None:
    """The figure is GB/s of the bytes read: reading n bytes at the reported rate cannot take
    longer than the whole call (which also allocates and touches the buffer), nor can the rate
    exceed any memory system's (a unit slip of 1000x fails one side or the other)."""
    import time
    n = 1 << 27
    t0 = time.perf_counter()
    gbs = _harness.read_bandwidth(n, 2, 1)
    wall = time.perf_counter() - t0
    assert n / (gbs * 1e9) <= wall
    assert gbs < 5000.0
    with pytest.raises(ValueError):
        _harness.read_bandwidth(1000, 2, 1)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 256, 576, 640, 896, 1000])
def test_rms_norm_simd_matches_scalar_reference(n: int) -> None:
    """RMSNorm (every architecture, every layer): the SIMD path bit for bit, and the float64 value."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0], n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    ref = _harness.rms_norm(x, w, 1e-6, reference=True)
    assert np.array_equal(_harness.rms_norm(x, w, 1e-6), ref)
    x64 = x.astype(np.float64)
    exact = x64 / np.sqrt(np.mean(x64 * x64) + 1e-6) * w
    np.testing.assert_allclose(ref, exact, rtol=1e-6, atol=1e-7 * np.abs(exact).max())


def test_swiglu_simd_matches_scalar_reference_and_silu() -> None:
    """SwiGLU (llama, qwen2 FFN): the SIMD path bit for bit, and silu within float rounding."""
    rng = np.random.default_rng(6)
    gate = np.concatenate([
        rng.standard_normal(10_000).astype(np.float32) * 6,
        np.array([0, -0.0, 1e-30, -1e-30, 80, -80, 87.3, -87.3, 88, -88, 100, -100, 1e30, -1e30,
                  np.inf, -np.inf, np.nan], np.float32),     # NaN: UBSan found the reference's NaN -> int
    ])
    up = rng.standard_normal(gate.size).astype(np.float32)
    ref = _harness.swiglu(gate, up, reference=True)
    assert np.isnan(ref[-1]), "NaN gate: the reference must give NaN"
    assert np.array_equal(_harness.swiglu(gate, up), ref, equal_nan=True)     # silu(-inf) is NaN
    g = gate.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):    # -inf / inf: not compared below
        exact = g / (1 + np.exp(-g)) * up
    finite = np.isfinite(gate)
    np.testing.assert_allclose(ref[finite], exact[finite], rtol=2e-6, atol=1e-35)  # exp underflows to 0 below -87.3
    assert ref[gate == np.inf].tolist() == (up[gate == np.inf] * np.inf).tolist()


def test_geglu_simd_matches_scalar_reference() -> None:
    """The GEGLU of gemma3's FFN (F16 GELU table, clamps at +-10): the SIMD path bit for bit."""
    rng = np.random.default_rng(5)
    gate = np.concatenate([
        rng.standard_normal(10_000).astype(np.float32) * 4,
        np.array([-10, 10, -10.0001, 9.9999, 0, -0.0, 6e-8, -6e-8, 3e-5, 65504, -1e30, 1e30], np.float32),
        (rng.standard_normal(1003) * 1e-6).astype(np.float32),          # f16 subnormals
    ])
    up = rng.standard_normal(gate.size).astype(np.float32)
    ref = _harness.geglu(gate, up, reference=True)
    assert np.array_equal(_harness.geglu(gate, up), ref)
    assert ref[gate <= -10].tolist() == [0.0] * int((gate <= -10).sum())
    np.testing.assert_array_equal(ref[gate >= 10], (gate * up)[gate >= 10])


def test_gelu_erf_simd_matches_scalar_and_exact_gelu() -> None:
    """The erf GELU of bert's FFN: the SIMD path equals the scalar loop bit for bit (whatever a
    value's offset), and both equal x * Phi(x) (math.erf in double) to float precision."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(10_000).astype(np.float32) * 3,
                        np.array([0, -0.0, 1e-30, -1e-30, 5, -5, 9.5, -9.5, 40, -40, 1e30, -1e30], np.float32)])
    ref = _harness.gelu_erf(x, reference=True)
    assert np.array_equal(_harness.gelu_erf(x), ref)
    assert np.array_equal(_harness.gelu_erf(x[3:])[:100], ref[3:103])        # lanes shifted by 3
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    err = np.abs(ref.astype(np.float64) - exact)
    # A&S: |erf error| < 1.5e-7, halved by x / 2; 1 + erf near 0 (x << 0) adds float rounding of 1
    assert (err <= 3e-7 * np.abs(x) + 2e-7 * np.abs(exact) + 1e-37).all(), float((err / (np.abs(x) + 1e-30)).max())


@pytest.mark.skipif(not _core.isa_available(2), reason="repacked panels are the AVX-512 path; this CPU lacks it")
@pytest.mark.parametrize("t", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K], ids=lambda t: t.name)
def test_repacked_weights_give_identical_results(t: T) -> None:
    """Weights repacked at load (16-row panels) multiply bit for bit like the GGUF rows: for one
    row (decode), a few rows, and blocks of 16+ rows (panel GEMM / AMX; 32 and 64 rows: AMX
    alone, with Q4_0 / Q5_0 / Q8_0 from the panel's signed copy), N not a multiple of 16."""
    rng = np.random.default_rng(int(t) + 400)
    k = 768
    for n, m in ((37, 1), (64, 2), (45, 5), (33, 17), (16, 40), (50, 32), (20, 64)):
        w = make_weights(t, n, k, rng)
        x = make_acts(m, k, rng)
        got = _harness.matmul_repacked(w, int(t), n, k, x, 2)
        assert np.array_equal(got, _harness.matmul(w, int(t), n, k, x, 2)), f"N={n} M={m}"
        packed = _harness.repack_weight(w, int(t), n, k)          # what benchmarks/matvec.py times
        assert packed.nbytes == -(-n // 16) * 16 * w.nbytes // n
        assert np.array_equal(_harness.matmul_repacked(packed, int(t), n, k, x, 2, prepacked=True), got)
    with pytest.raises(ValueError, match="repack_weight's output"):
        _harness.matmul_repacked(packed[:-1], int(t), n, k, x, 2, prepacked=True)
