"""The low-bit i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S.

References, independent of the C++ under test:
  * dequantization: gguf-py's dequantize (its own numpy code and grid tables), exact equality on
    random blocks and on real model weights quantized to each type;
  * dot products: float64 numpy on the dequantized operands; every SIMD level equal to the scalar
    reference bit for bit (both sum each super-block's integers exactly);
  * quantization: ggml's own quantize_iq2_xxs ... quantize_iq3_s (ggml_quantize_chunk) from the
    libggml-base built from the vendored llama.cpp (benchmarks/llamaserver_build.py), byte for
    byte, with random and real rows and random importance weights (skipped where it is not built).
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from conftest import model_file
from localllm import _core, _harness

TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S]
ISAS = [i for i in range(3) if _core.isa_available(i)]
# llama-quant.cpp's tensor_requires_imatrix: llama-quantize refuses these without an imatrix.
NEEDS_IMATRIX = {T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS}
# ggml's quantizers of these two assert on a missing imatrix (no unweighted path).
NO_UNWEIGHTED = {T.IQ2_XXS, T.IQ2_XS}


def random_blocks(t: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random blocks (every bit pattern is a valid block) with a sane f16 super-scale first."""
    raw = rng.integers(0, 256, size=(n_blocks, GGML_QUANT_SIZES[t][1]), dtype=np.uint8)
    d = (rng.uniform(0.001, 0.01, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
    raw[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    return raw


def real_rows(n_rows: int) -> np.ndarray:
    """Real weights: the first rows of SmolLM2-135M's blk.0.ffn_down (1536 = 6 x 256 per row)."""
    reader = GGUFReader(model_file("smollm2-135m-q4_1"))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    return np.ascontiguousarray(dequantize(tensor.data, tensor.tensor_type)[:n_rows], np.float32)


def test_registry_entries():
    for t in TYPES:
        info = _core.type_info(int(t))
        assert (info["block_elems"], info["block_bytes"]) == GGML_QUANT_SIZES[t]
        assert info["vec_dot_type"] == T.Q8_K and info["importance_aware"]
        assert info["needs_importance"] == (t in NEEDS_IMATRIX), t.name
        assert info["can_quantize"] == (t not in NO_UNWEIGHTED), t.name
        assert "scalar" in info["kernels"] and ("avx2" in info["kernels"]) == _core.isa_available(1)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_dequantize_random_blocks_equal_gguf(t):
    raw = random_blocks(t, 64, np.random.default_rng(int(t)))
    ours = np.asarray(_core.dequantize(raw, int(t), 64 * 256))
    ref = dequantize(raw, t).reshape(-1).astype(np.float32)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_dequantize_real_weights_equal_gguf(t):
    x = real_rows(8)
    imp = np.random.default_rng(1).uniform(0.1, 2.0, x.shape[1]).astype(np.float32)
    raw = np.asarray(_core.quantize(x, int(t), importance=imp))
    ours = np.asarray(_core.dequantize(raw, int(t), x.size))
    ref = dequantize(raw, t).reshape(-1).astype(np.float32)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))
    # and the quantization is a quantization of x: error well below x's own spread
    rel = np.sqrt(np.mean((ref - x.reshape(-1)) ** 2) / np.mean(x ** 2))
    assert rel < (0.45 if t in (T.IQ2_XXS, T.IQ2_XS) else 0.35), (t.name, rel)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_vec_dot_every_level_equals_scalar_and_float64(t):
    rng = np.random.default_rng(100 + int(t))
    n = 4 * 256
    for _ in range(8):
        w = random_blocks(t, n // 256, rng).reshape(-1)
        x = rng.standard_normal(n).astype(np.float32)
        xq = np.asarray(_harness.quantize_act(x, int(T.Q8_K), 0))
        got = {isa: _harness.vec_dot(int(t), w, xq, n, isa) for isa in ISAS}
        for isa in ISAS:
            assert np.float32(got[isa]).view(np.uint32) == np.float32(got[0]).view(np.uint32), (t.name, isa)
        wd = dequantize(w, t).reshape(-1).astype(np.float64)
        xb = xq.reshape(-1, 292)
        xd = (xb[:, :4].copy().view(np.float32).astype(np.float64) * xb[:, 4:260].view(np.int8)).reshape(-1)
        exact = float(wd @ xd)
        bound = float(np.abs(wd * xd).sum()) * 4e-7 * (n // 256)   # f32 scale products and sums
        assert abs(got[0] - exact) <= bound, (t.name, got[0], exact, bound)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_matmul_tiles_equal_the_vec_dot(t):
    """matmul's multi-row tiles (one weight group decoded for up to 4 activation rows), any batch
    size and thread split: each Y[m, n] is the 1 x 1 dot product of that pair, bit for bit."""
    rng = np.random.default_rng(200 + int(t))
    n, k = 7, 512
    w = random_blocks(t, n * k // 256, rng).reshape(n, -1)
    x = rng.standard_normal((9, k)).astype(np.float32)
    for isa in ISAS:
        y = np.asarray(_harness.matmul(w, int(t), n, k, x, 2, isa))
        for m in range(x.shape[0]):
            xq = np.asarray(_harness.quantize_act(x[m], int(T.Q8_K), isa))
            ref = np.array([_harness.vec_dot(int(t), w[r], xq, k, isa) for r in range(n)], np.float32)
            assert np.array_equal(y[m].view(np.uint32), ref.view(np.uint32)), (t.name, isa, m)
        assert np.array_equal(np.asarray(_harness.matmul(w, int(t), n, k, x[3:4], 1, isa)), y[3:4])


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_prompt_units_equal_the_scalar_reference(t):
    """Prompts (5+ activation rows a unit: dot_avx2_iq.cpp's IqPanel, 8-row panels decoded once a
    super-block, units of up to 256 activation rows) give the scalar reference's bits: weight rows
    ending inside a panel and a run (N = 37, 5), 1-3 super-blocks, 5, 40 and 300 activation rows
    (a second unit of 44), 1-3 threads."""
    rng = np.random.default_rng(300 + int(t))
    for n, k, m in ((37, 768, 40), (5, 256, 5), (37, 512, 300)):
        w = random_blocks(t, n * k // 256, rng).reshape(n, -1)
        x = rng.standard_normal((m, k)).astype(np.float32)
        ref = np.asarray(_harness.matmul(w, int(t), n, k, x, 2, 0))
        for isa in ISAS[1:]:
            for threads in (1, 2, 3):
                y = np.asarray(_harness.matmul(w, int(t), n, k, x, threads, isa))
                assert np.array_equal(y.view(np.uint32), ref.view(np.uint32)), (t.name, isa, n, k, m, threads)


def test_needs_importance_is_refused_with_a_clear_error():
    x = np.random.default_rng(0).standard_normal(512).astype(np.float32)
    for t in NO_UNWEIGHTED:
        with pytest.raises(ValueError, match="quantize"):
            _core.quantize(x, int(t))
    with pytest.raises(ValueError, match="importance has 3 values"):
        _core.quantize(x, int(T.IQ3_S), importance=np.ones(3, np.float32))
    # a type whose ggml quantizer ignores importances (Q8_0) writes its unweighted bytes
    weighted = _core.quantize(x, int(T.Q8_0), importance=np.linspace(0, 2, 512, dtype=np.float32))
    assert np.array_equal(weighted, _core.quantize(x, int(T.Q8_0)))


# ---------------------------------------------------------------------------------------------
# byte-identical with ggml
# ---------------------------------------------------------------------------------------------

def ggml_base() -> ctypes.CDLL:
    root = Path(os.environ.get("LOCALLLM_LLAMA_SERVER_DIR", Path.home() / ".cache/localllm/llama-server"))
    lib_path = root / "build" / "bin" / "libggml-base.so"
    if not lib_path.exists():
        pytest.skip(f"ggml is not built from the vendored llama.cpp ({lib_path}): benchmarks/llamaserver_build.py")
    lib = ctypes.CDLL(str(lib_path))
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def ggml_quantize(lib: ctypes.CDLL, t: T, x: np.ndarray, imp: np.ndarray | None) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    rows, n = x.shape
    out = np.zeros((rows, n // 256 * GGML_QUANT_SIZES[t][1]), np.uint8)
    lib.ggml_quantize_init(int(t))
    lib.ggml_quantize_chunk(int(t), x.ctypes.data, out.ctypes.data, 0, rows, n,
                            None if imp is None else imp.ctypes.data)
    return out


def hard_rows(rng: np.random.Generator) -> np.ndarray:
    """Rows that walk the quantizers' edge paths: heavy tails, all-zero groups of 16 / 32 and whole
    all-zero super-blocks, tiny values, constant runs, exact ties."""
    x = rng.standard_normal((12, 1024)).astype(np.float32)
    x[0] *= rng.standard_t(2, 1024).astype(np.float32)
    x[1, 32:64] = 0
    x[1, 256 + 16:256 + 32] = 0
    x[2, 512:768] = 0
    x[3] = np.round(x[3] * 2) / 2
    x[4] *= 1e-9
    x[5, :] = 0.25
    x[6, ::3] = 0
    x[7] = -np.abs(x[7])
    return x


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_quantize_is_byte_identical_to_ggml(t):
    lib = ggml_base()
    rng = np.random.default_rng(7 + int(t))
    for x in (hard_rows(rng), real_rows(16)):
        imp = rng.uniform(0.0, 3.0, x.shape[1]).astype(np.float32) ** 2
        imp[5::7] = 0           # weights the imatrix never saw active
        imp[256:288] = 0        # a whole group of them
        ours = np.asarray(_core.quantize(x, int(t), importance=imp))
        ref = ggml_quantize(lib, t, x, imp)
        mismatched = [r for r in range(x.shape[0]) if not np.array_equal(ours[r], ref[r])]
        assert not mismatched, (t.name, mismatched)
        if t not in NO_UNWEIGHTED:
            assert np.array_equal(np.asarray(_core.quantize(x, int(t))), ggml_quantize(lib, t, x, None)), t.name


# ---------------------------------------------------------------------------------------------
# through the model: a llama whose every matrix is in one of the types
# ---------------------------------------------------------------------------------------------

D, F, H, HKV, V, LAYERS = 256, 512, 4, 2, 320, 2


def write_llama(path: Path, matrices: dict[str, tuple[np.ndarray, T]], small: dict[str, np.ndarray]) -> Path:
    """A llama GGUF: `matrices` as (numpy-order f32 values or raw blocks, type), `small` in F32."""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-5)
    for name, arr in small.items():
        w.add_tensor(name, arr)
    for name, (data, t) in matrices.items():
        if t == T.F32:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=t)   # rows of blocks: gguf-py reads the shape from the bytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def llama_weights(rng: np.random.Generator, n_layer: int = LAYERS) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    hd = D // H
    small = {"output_norm.weight": np.ones(D, np.float32)}
    mats = {"token_embd.weight": rng.standard_normal((V, D)), "output.weight": rng.standard_normal((V, D)) * 0.1}
    for il in range(n_layer):
        p = f"blk.{il}."
        small |= {p + "attn_norm.weight": np.ones(D, np.float32), p + "ffn_norm.weight": np.ones(D, np.float32)}
        mats |= {p + "attn_q.weight": rng.standard_normal((D, D)) * 0.1,
                 p + "attn_k.weight": rng.standard_normal((HKV * hd, D)) * 0.1,
                 p + "attn_v.weight": rng.standard_normal((HKV * hd, D)) * 0.1,
                 p + "attn_output.weight": rng.standard_normal((D, D)) * 0.1,
                 p + "ffn_gate.weight": rng.standard_normal((F, D)) * 0.1,
                 p + "ffn_up.weight": rng.standard_normal((F, D)) * 0.1,
                 p + "ffn_down.weight": rng.standard_normal((D, F)) * 0.1}
    return {k: v.astype(np.float32) for k, v in mats.items()}, small


def forward_logits(path: Path, ids: list[int]) -> np.ndarray:
    """Every position's logits of one sequence (paged KV: 2 blocks of 16)."""
    m = _core.Model(str(path), 1, 4, 16)
    n = len(ids)
    out = m.forward(np.array(ids, np.int32), np.arange(n, dtype=np.int32), np.zeros(n, np.int32),
                    np.array([[1, 2]], np.int32), np.arange(n, dtype=np.int32))
    return np.asarray(out, np.float64)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_model_with_every_matrix_in_the_type_computes_its_weights(t, tmp_path):
    """Logits of the model in type t (its matmuls: the type's dot products with Q8_K activations)
    against the same model in F32 holding gguf-py's dequantization of those bytes: what is left is
    the runtime's activation rounding. (Against the unquantized random weights a 2-3 bit model of
    chaotic random weights says nothing; the types' weight error is checked on real weights.)"""
    rng = np.random.default_rng(int(t))
    mats, small = llama_weights(rng)
    quantized = {}
    for name, x in mats.items():
        imp = rng.uniform(0.5, 1.5, x.shape[1]).astype(np.float32)
        quantized[name] = np.asarray(_core.quantize(x, int(t), importance=imp))
    path_q = write_llama(tmp_path / "q.gguf", {k: (v, t) for k, v in quantized.items()}, small)
    deq = {k: (dequantize(v, t).astype(np.float32), T.F32) for k, v in quantized.items()}
    path_deq = write_llama(tmp_path / "deq.gguf", deq, small)
    ids = [int(i) for i in rng.integers(0, V, 12)]
    got, ref = forward_logits(path_q, ids), forward_logits(path_deq, ids)
    assert np.isfinite(got).all()
    # Q4_K's and Q2_K's files measure 0.037 against their own dequantized weights on this model
    # (8-bit activations and the F16 KV cache on chaotic random weights): the same runtime error.
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.06, t.name
