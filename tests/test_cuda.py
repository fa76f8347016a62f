"""CUDA kernels against the CPU reference, op by op, on the same inputs (in the spirit of
llama.cpp's test-backend-ops): dequantization and embedding rows exact, float paths within a
normalized MSE of 5e-4. Runs where a GPU is present (tests/gpu_check.sh on a lent machine)."""
import numpy as np
import pytest

from localllm import _core, _harness, hub
from localllm.quants import dequantize, row_bytes

import cuda_blocks
from cuda_blocks import CUDA_TYPES, MATMUL_TYPES, NMSE_MAX, nmse

pytestmark = pytest.mark.skipif(
    _core.cuda_device_count() == 0,
    reason="no CUDA device on this machine (or _core built without CUDA): tests/gpu_check.sh runs these on a GPU")


def random_blocks(type_id: int, n: int, rng) -> np.ndarray:
    return cuda_blocks.random_blocks(_core, type_id, n, rng)


def weight_bytes(type_id: int, w: np.ndarray) -> np.ndarray:
    return cuda_blocks.weight_bytes(_core, type_id, w)


# ---- dequantization and embedding rows: exact ----

@pytest.mark.parametrize("type_id", sorted(CUDA_TYPES))
def test_cuda_dequantize_random_blocks_match_cpu(type_id):
    rng = np.random.default_rng(type_id)
    n = 256 * 4096
    raw = random_blocks(type_id, n, rng)
    cpu = dequantize(raw, type_id, (n,)).reshape(-1)
    gpu = _harness.cuda_dequantize(raw, type_id, n)
    np.testing.assert_array_equal(cpu, gpu)


@pytest.mark.parametrize("model", ["qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m", "smollm2-135m-q4_1"])
def test_cuda_dequantize_real_tensors_match_cpu(model):
    path = hub.cached_path(model)
    if not path.exists():
        pytest.skip(f"{model} is not in the model cache")
    from localllm.gguf import GGUFFile
    f = GGUFFile(str(path))
    seen = set()
    for t in f.tensors:
        if int(t.type) in CUDA_TYPES and int(t.type) not in seen:
            seen.add(int(t.type))
            raw = np.ascontiguousarray(f.tensor_data(t.name)).view(np.uint8).reshape(-1)
            cpu = dequantize(raw, int(t.type), (t.n_elements,)).reshape(-1)
            np.testing.assert_array_equal(cpu, _harness.cuda_dequantize(raw, int(t.type), t.n_elements), err_msg=t.name)
    assert seen


@pytest.mark.parametrize("type_id", [0] + sorted(CUDA_TYPES))
def test_cuda_embedding_rows_match_cpu(type_id):
    rng = np.random.default_rng(100 + type_id)
    n_rows, k = 50, 512
    raw = (rng.standard_normal(n_rows * k).astype(np.float32).view(np.uint8) if type_id == 0
           else random_blocks(type_id, n_rows * k, rng))
    table = (raw.view(np.float32) if type_id == 0 else dequantize(raw, type_id, (n_rows * k,))).reshape(n_rows, k)
    ids = np.array([3, 0, 49, 3, 17], np.int32)
    np.testing.assert_array_equal(_harness.cuda_get_rows(raw, type_id, n_rows, k, ids), table[ids])
    with pytest.raises(IndexError, match="token id 50 out of range"):
        _harness.cuda_get_rows(raw, type_id, n_rows, k, np.array([50], np.int32))


# ---- matmul: both paths, every type, against the CPU's matmul ----

@pytest.mark.parametrize("type_id", MATMUL_TYPES)
@pytest.mark.parametrize("path,M", [("decode", 1), ("decode", 5), ("decode", 8), ("decode", 11),
                                    ("prompt", 1), ("prompt", 37), ("prompt", 130), ("auto", 64)])
def test_cuda_matmul_matches_cpu(type_id, path, M):
    rng = np.random.default_rng(type_id * 1000 + M)
    N, K = 200, 768                          # N not a multiple of the 64-row tile
    w = weight_bytes(type_id, rng.standard_normal((N, K)).astype(np.float32))
    x = rng.standard_normal((M, K)).astype(np.float32)
    cpu = _harness.matmul(w, type_id, N, K, x)
    gpu = _harness.cuda_matmul(w, type_id, N, K, x, path)
    assert gpu.shape == (M, N)
    assert nmse(gpu, cpu) <= NMSE_MAX, (type_id, path, M, nmse(gpu, cpu))


@pytest.mark.parametrize("model", ["qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m", "smollm2-135m-q4_1"])
def test_cuda_matmul_real_weights_match_cpu(model):
    """One 2-D weight of each type in the model (its first 256 rows), decode and prompt batches."""
    path = hub.cached_path(model)
    if not path.exists():
        pytest.skip(f"{model} is not in the model cache")
    from localllm.gguf import GGUFFile
    f = GGUFFile(str(path))
    rng = np.random.default_rng(7)
    seen = set()
    for t in f.tensors:
        shape = list(t.shape)
        if int(t.type) not in MATMUL_TYPES or int(t.type) in seen or len(shape) != 2:
            continue
        seen.add(int(t.type))
        K, N = shape[0], min(shape[1], 256)
        raw = np.ascontiguousarray(f.tensor_data(t.name)).view(np.uint8).reshape(-1)[:N * row_bytes(int(t.type), K)]
        for M in (1, 4, 96):
            x = rng.standard_normal((M, K)).astype(np.float32)
            cpu = _harness.matmul(raw, int(t.type), N, K, x)
            err = nmse(_harness.cuda_matmul(raw, int(t.type), N, K, x), cpu)
            assert err <= NMSE_MAX, (t.name, M, err)
    assert seen


# ---- row and element-wise ops ----

def test_cuda_rms_norm_matches_cpu():
    rng = np.random.default_rng(1)
    for n in (64, 576, 896, 2048):
        x = (rng.standard_normal((7, n)) * 3).astype(np.float32)
        w = rng.standard_normal(n).astype(np.float32)
        gpu = _harness.cuda_rms_norm(x, w, 1e-6)
        cpu = np.stack([_harness.rms_norm(row, w, 1e-6) for row in x])
        assert nmse(gpu, cpu) <= NMSE_MAX


@pytest.mark.parametrize("style", ["normal", "neox"])
@pytest.mark.parametrize("head_dim,rope_dims", [(64, 64), (256, 256), (128, 64)])
def test_cuda_rope_matches_cpu(style, head_dim, rope_dims):
    rng = np.random.default_rng(head_dim + rope_dims)
    T, H = 40, 5
    x = rng.standard_normal((T, H, head_dim)).astype(np.float32)
    positions = np.concatenate([np.arange(20), np.arange(3000, 3020)]).astype(np.int32)
    for base in (10000.0, 1000000.0):
        gpu = _harness.cuda_rope(x, positions, rope_dims, base, style)
        cpu = _harness.cuda_rope_cpu_reference(x, positions, rope_dims, base, style)
        assert nmse(gpu, cpu) <= NMSE_MAX
        assert not np.allclose(cpu, x)   # the reference really rotated


@pytest.mark.parametrize("scaling", ["llama3", "linear", "yarn"])
def test_cuda_scaled_rope_matches_cpu(scaling):
    """RoPE scaling (csrc/common/rope.h, shared by both): frequency factors, linear, YaRN."""
    rng = np.random.default_rng(7)
    T, H, head_dim = 40, 4, 128
    x = rng.standard_normal((T, H, head_dim)).astype(np.float32)
    positions = np.concatenate([np.arange(20), np.arange(9000, 9020)]).astype(np.int32)
    kw = {"llama3": dict(freq_factors=np.linspace(1.0, 8.0, head_dim // 2).astype(np.float32)),
          "linear": dict(freq_scale=0.25),
          "yarn": dict(freq_scale=0.25, ext_factor=1.0, attn_factor=0.9, n_ctx_orig=4096)}[scaling]
    gpu = _harness.cuda_rope(x, positions, head_dim, 500000.0, "neox", **kw)
    cpu = _harness.cuda_rope_cpu_reference(x, positions, head_dim, 500000.0, "neox", **kw)
    plain = _harness.cuda_rope_cpu_reference(x, positions, head_dim, 500000.0, "neox")
    assert nmse(gpu, cpu) <= NMSE_MAX
    assert not np.allclose(cpu, plain, atol=1e-3)   # the scaling changed the angles


@pytest.mark.parametrize("op", ["swiglu", "geglu"])
def test_cuda_glu_matches_cpu(op):
    rng = np.random.default_rng(3)
    g = (rng.standard_normal(100_003) * 4).astype(np.float32)
    g[:4] = [-12.0, 12.0, -10.0, 10.0]       # both clamps of GEGLU
    u = rng.standard_normal(g.size).astype(np.float32)
    cpu = getattr(_harness, op)(g, u)
    assert nmse(_harness.cuda_eltwise(op, g, u), cpu) <= NMSE_MAX


def test_cuda_adds_and_scale_are_exact():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((9, 300)).astype(np.float32)
    b = rng.standard_normal((9, 300)).astype(np.float32)
    bias = rng.standard_normal(300).astype(np.float32)
    np.testing.assert_array_equal(_harness.cuda_eltwise("add", a, b), a + b)
    np.testing.assert_array_equal(_harness.cuda_eltwise("add_bias_rows", a, bias), a + bias)
    np.testing.assert_array_equal(_harness.cuda_eltwise("scale", a, a, 29.9332590942), a * np.float32(29.9332590942))


# ---- paged KV cache and attention ----

def paged_batch(lengths, n_head, n_head_kv, hd, block_size=16, seed=0):
    """Sequences of the given lengths (tokens contiguous per sequence), physical blocks shuffled."""
    rng = np.random.default_rng(seed)
    T = sum(lengths)
    q = rng.standard_normal((T, n_head, hd)).astype(np.float32)
    k = rng.standard_normal((T, n_head_kv, hd)).astype(np.float32)
    v = rng.standard_normal((T, n_head_kv, hd)).astype(np.float32)
    n_blk = [(n + block_size - 1) // block_size for n in lengths]
    ids = rng.permutation(sum(n_blk) + 3).astype(np.int32)
    tables = np.full((len(lengths), max(n_blk)), -1, np.int32)
    used = 0
    for s, nb in enumerate(n_blk):
        tables[s, :nb] = ids[used:used + nb]
        used += nb
    positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    seq = np.concatenate([np.full(n, s, np.int32) for s, n in enumerate(lengths)])
    return dict(q=q, k=k, v=v, positions=positions, seq_of_token=seq, block_tables=tables,
                n_blocks=len(ids), block_size=block_size)


def attend_both(b, rows, scale, window, **gpu_kw):
    rows = np.asarray(rows, np.int32)
    args = (b["q"], b["k"], b["v"], b["positions"], b["seq_of_token"], b["block_tables"], b["n_blocks"],
            b["block_size"], rows, scale, window)
    return _harness.cuda_attention_test(*args, **gpu_kw), _harness.attention_test(*args)


def test_cuda_kv_write_and_block_copy_are_exact():
    b = paged_batch([37, 20], 4, 2, 64)
    k_cache, v_cache = _harness.cuda_kv_test(b["k"], b["v"], b["positions"], b["seq_of_token"], b["block_tables"],
                                          b["n_blocks"], b["block_size"])
    bs = b["block_size"]
    for t in range(len(b["positions"])):
        blk = b["block_tables"][b["seq_of_token"][t], b["positions"][t] // bs]
        np.testing.assert_array_equal(k_cache[blk, b["positions"][t] % bs], b["k"][t].reshape(-1).astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(v_cache[blk, b["positions"][t] % bs], b["v"][t].reshape(-1).astype(np.float16).view(np.uint16))
    # a block copy after the first 16 tokens: the destination holds the source's slots as they were then
    src = int(b["block_tables"][0, 0])
    dst = int(np.setdiff1d(np.arange(b["n_blocks"]), b["block_tables"]).min())
    k2, v2 = _harness.cuda_kv_test(b["k"], b["v"], b["positions"], b["seq_of_token"], b["block_tables"],
                                b["n_blocks"], bs, first_rows=16, copies=[(src, dst)])
    np.testing.assert_array_equal(k2[dst], k_cache[src])
    np.testing.assert_array_equal(v2[dst], v_cache[src])


# (n_head, n_head_kv, head_dim) of SmolLM2-135M, Qwen2.5-0.5B and Gemma3-270M
SHAPES = [(9, 3, 64), (14, 2, 64), (4, 1, 256)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("window", [0, 24])
def test_cuda_attention_prompt_and_decode_match_cpu(shape, window):
    n_head, n_head_kv, hd = shape
    b = paged_batch([37, 5, 70], n_head, n_head_kv, hd, seed=hd + window)
    scale = 1.0 / np.sqrt(hd)
    every = np.arange(len(b["positions"]))
    last = np.array([36, 41, 111])
    mixed = np.concatenate([[36], np.arange(42, 112)])   # a decode token beside a prompt chunk
    for rows in (every, last, mixed):
        gpu, cpu = attend_both(b, rows, scale, window)
        assert nmse(gpu, cpu) <= NMSE_MAX, (len(rows), nmse(gpu, cpu))


@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_attention_over_shared_and_copied_blocks(shape):
    """Two sequences share a 20-token prompt: block 0 shared as is, the partly filled block 1
    copied on write for the second before each appends its own tokens."""
    n_head, n_head_kv, hd = shape
    rng = np.random.default_rng(5)
    bs, shared, own = 16, 20, 30
    q = rng.standard_normal((2 * (shared + own), n_head, hd)).astype(np.float32)
    kv = [rng.standard_normal((2 * (shared + own), n_head_kv, hd)).astype(np.float32) for _ in range(2)]
    for x in kv + [q]:   # the second sequence's prompt is the first's
        x[shared + own:2 * shared + own] = x[:shared]
    # token order: A's prompt, then A's own, then B's prompt, then B's own
    positions = np.concatenate([np.arange(shared + own)] * 2).astype(np.int32)
    seq = np.repeat(np.array([0, 1], np.int32), shared + own)
    tables = np.array([[0, 1, 2, 3], [0, 5, 6, 7]], np.int32)
    b = dict(q=q, k=kv[0], v=kv[1], positions=positions, seq_of_token=seq, block_tables=tables, n_blocks=8, block_size=bs)
    order = np.concatenate([np.arange(shared), np.arange(shared, shared + own),
                            np.arange(2 * shared + own, 2 * (shared + own))])   # B's prompt is never written
    b2 = {key: (val[order] if key in ("q", "k", "v", "positions", "seq_of_token") else val) for key, val in b.items()}
    scale = 1.0 / np.sqrt(hd)
    rows = np.arange(shared, len(order))
    gpu = _harness.cuda_attention_test(b2["q"], b2["k"], b2["v"], b2["positions"], b2["seq_of_token"], tables, 8, bs,
                                    rows.astype(np.int32), scale, 0, first_rows=shared, copies=[(1, 5)])
    # CPU: every token's K/V written explicitly (B's prompt into blocks 0 and 5)
    cpu = _harness.attention_test(q, kv[0], kv[1], positions, seq, tables, 8, bs,
                               np.concatenate([np.arange(shared, shared + own),
                                               np.arange(2 * shared + own, 2 * (shared + own))]).astype(np.int32),
                               scale, 0)
    assert nmse(gpu, cpu) <= NMSE_MAX


# ---- CUDA graphs ----

def test_cuda_graph_replays_a_decode_step_exactly():
    """A captured step (RMSNorm, int8 matmul) replayed on new inputs gives the direct run's bits."""
    rng = np.random.default_rng(9)
    K, N = 896, 300
    w = weight_bytes(8, rng.standard_normal((N, K)).astype(np.float32))   # Q8_0, as Qwen2.5-0.5B's 896-wide rows
    xs = rng.standard_normal((3, 2, K)).astype(np.float32)
    direct, replayed = _harness.cuda_graph_test(xs, rng.standard_normal(K).astype(np.float32), w, 8, N)
    np.testing.assert_array_equal(replayed, direct)
    assert not np.array_equal(direct[0], direct[1])   # each replay read its own input


# ---- errors ----

def test_cuda_rejects_bad_input():
    with pytest.raises(ValueError, match="does not match"):
        _harness.cuda_dequantize(np.zeros(17, np.uint8), 2, 32)
    with pytest.raises(ValueError):
        _harness.cuda_dequantize(np.zeros(16, np.uint8), 9, 32)     # Q8_1: no CUDA kernel
    b = paged_batch([8], 2, 1, 48)
    with pytest.raises(ValueError, match="head_dim 48"):
        attend_both(b, [7], 0.1, 0)
    with pytest.raises(ValueError, match="path"):
        _harness.cuda_matmul(np.zeros(4 * 32 * 2, np.uint8), 0, 2, 32, np.zeros((1, 32), np.float32), "fast")


def test_cuda_out_of_memory_names_what_did_not_fit():
    free, total = _core.cuda_mem_info()
    with pytest.raises(MemoryError, match=r"GPU out of memory: .* for layer 7 ffn_up did not fit \(.* free of"):
        _harness.cuda_alloc(total * 4, "layer 7 ffn_up")
    _harness.cuda_alloc(1 << 20, "a small buffer")     # the device is still usable after the failure
