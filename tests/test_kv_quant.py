"""The quantized KV cache (llama.cpp's --cache-type-k / --cache-type-v q8_0 / q4_0).

Attention over a quantized cache is held to a float64 reference that reads K and V through the
`gguf` package's own quantize + dequantize (an independent implementation of ggml's blocks),
after llama.cpp's Walsh-Hadamard rotation of a quantized cache (keys and queries by the largest
power of two >= 64 dividing head_dim, values by 64 and the output rotated back; none when
head_dim % 64 != 0) and with the query rounded to Q8_0 against quantized keys (llama.cpp's
flash attention takes it so), every kernel bit-identical to the scalar one; the memory the cache takes follows its types in
the allocator, the planner and `kv_bytes_per_token` alike; what cannot run is refused with an
error naming it; perplexity on the three real models is within the bounds of
llama.cpp's with the same cache types (q8_0 0.5%, q4_0 2%; tests/data/reference/perplexity.json,
made by tests/data/regenerate.py). Batch invariance and the engine's leak test with a quantized
cache are in test_batch_invariance.py and test_engine.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

import json

from conftest import CORPUS, REFERENCE, model_file
from localllm import LLM, _core, _harness
from localllm.engine import kv_bytes_per_token
from localllm.gguf import GGUFFile
from test_attention import KERNELS, attend, make_batch

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
    # A quantized K meets the query rounded to Q8_0, as in llama.cpp's flash attention.
    q = stored(b.q, "q8_0", rk) if cache_k != "f16" else rotate(b.q, rk)
    q = q.astype(np.float32).astype(np.float16).astype(np.float64)
    k, v = stored(b.k, cache_k, rk), stored(b.v, cache_v, rv)
    out = attend(b, rows, q, k, v, scale, window)
    return rotate(out, rv)


def run(b, rows, scale, window, kernel, cache_k, cache_v, n_threads=2):
    return _harness.attention_test(b.q, b.k, b.v, b.positions, b.seq, b.tables, b.n_blocks, b.block_size,
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


def test_quantized_attention_is_batch_invariant():
    """A sequence's rows do not depend on the other sequences, the threads or decode vs prefill."""
    b = make_batch([90, 33, 5], 8, 2, 64, seed=3)
    scale = 0.125
    own = b.rows_of(0)
    alone = run(b, own, scale, 0, -1, "q4_0", "q8_0", n_threads=1)
    together = run(b, np.arange(len(b.seq)), scale, 0, -1, "q4_0", "q8_0", n_threads=2)
    assert np.array_equal(alone, together[own])
    last = run(b, own[-1:], scale, 0, -1, "q4_0", "q8_0")           # decode: the last token only
    assert np.array_equal(last[0], alone[-1])


@pytest.mark.parametrize("cache_type,bytes_per_32", [("f16", 64), ("q8_0", 34), ("q4_0", 18)])
def test_kv_memory_follows_the_type(cache_type, bytes_per_32):
    path = str(model_file("smollm2-135m-q4_1"))
    meta = GGUFFile(path).metadata
    n_layer = _core.Footprint(path).n_layer
    model = _core.Model(path, 1, 33, 16, cache_type_k=cache_type, cache_type_v=cache_type)
    assert (model.cache_type_k, model.cache_type_v) == (cache_type, cache_type)
    h = model.hparams
    width = h["n_head_kv"] * h["head_dim"]
    per_token = n_layer * 2 * width // 32 * bytes_per_32
    assert model.kv_bytes == 33 * 16 * per_token
    assert kv_bytes_per_token(meta, cache_type, cache_type) == per_token
    assert _core.Footprint(path).bytes(0, 33, 16, 8, cache_type, cache_type)["CPU"]["kv"] == model.kv_bytes
    assert model.allocated["CPU"]["kv"] == model.kv_bytes
    mixed = _core.Model(path, 1, 33, 16, cache_type_k=cache_type, cache_type_v="f16")
    assert mixed.kv_bytes == 33 * 16 * n_layer * width // 32 * (bytes_per_32 + 64)


def test_quantized_cache_generates_like_f16_at_first():
    """A q8_0 cache on a real model: the greedy start matches the f16 cache's (the quantization
    error is far below the first tokens' logit margins), and every request frees its blocks."""
    key = "smollm2-135m-q4_1"
    prompt = "The capital of France is"
    f16 = LLM(str(model_file(key)), n_threads=2, n_ctx=256, seed=0)
    q8 = LLM(str(model_file(key)), n_threads=2, n_ctx=256, seed=0, cache_type_k="q8_0", cache_type_v="q8_0")
    assert q8.cache_types == ("q8_0", "q8_0")
    a = f16.generate(prompt, max_tokens=8, temperature=0).token_ids
    b = q8.generate(prompt, max_tokens=8, temperature=0).token_ids
    assert a[:4] == b[:4]
    assert q8.engine.pool.num_used == 0


def test_bad_cache_types_are_refused():
    path = str(model_file("smollm2-135m-q4_1"))
    with pytest.raises(ValueError, match="cache_type_k must be one of f16, q8_0, q4_0"):
        LLM(path, n_ctx=64, cache_type_k="q5_1")
    with pytest.raises(ValueError, match="numerics='fast'"):
        LLM(path, n_ctx=64, cache_type_v="q8_0", numerics="llama.cpp")
    with pytest.raises(ValueError, match="not supported"):
        _core.Model(path, 1, 8, 16, cache_type_k="q4_1")
    with pytest.raises(ValueError, match="fast numerics only"):
        _core.Model(path, 1, 8, 16, numerics="llama.cpp", cache_type_k="q8_0")
    b = make_batch([20], 4, 2, 48, seed=1)        # 48 is not a multiple of the 32-value block
    with pytest.raises(ValueError, match="head_dim to be a multiple of 32"):
        run(b, [0], 0.1, 0, -1, "q8_0", "f16")


PPL_TOL = {"q8_0": 0.005, "q4_0": 0.02}      # the bounds, relative to llama.cpp's figure


def _quantized_ppl_rows():
    rows = json.loads((REFERENCE / "perplexity.json").read_text())["results"]
    return [pytest.param(r, id=f"{r['model']}-{r['cache_type_k']}-{r['cache_type_v']}")
            for r in rows if "cache_type_k" in r]


@pytest.mark.parametrize("row", _quantized_ppl_rows())
def test_perplexity_with_quantized_cache_matches_llamacpp(row):
    """The whole corpus (14 chunks of 512; llama-perplexity with -ctk/-ctv and -fa on, which a
    quantized V needs there) against the same run of llama.cpp: within the bound on either
    side (q8_0 0.5%, q4_0 2%). Fewer chunks are too few to hold to these bounds: on the first 4
    alone the two runtimes differed by -1.2% (Qwen2.5 q8_0) and -2.4% (Gemma3 q4_0)."""
    from localllm.perplexity import perplexity
    llm = LLM(str(model_file(row["model"])), n_threads=2, n_ctx=row["n_ctx"], seed=0,
              cache_type_k=row["cache_type_k"], cache_type_v=row["cache_type_v"])
    res = perplexity(llm, CORPUS.read_text(encoding="utf-8"), row["n_ctx"], max_chunks=row.get("max_chunks"))
    assert res.n_chunks == row["chunks"]
    tol = max(PPL_TOL.get(row["cache_type_k"], 0), PPL_TOL.get(row["cache_type_v"], 0))
    rel = res.ppl / row["ppl"] - 1
    print(f"{row['model']} {row['cache_type_k']}/{row['cache_type_v']}: PPL {res.ppl:.4f} "
          f"(llama.cpp {row['ppl']}, {100 * rel:+.2f}%)")
    assert abs(rel) <= tol
