"""Mixture-of-experts layers (qwen3moe) on small files written with the gguf package:
a token's logits do not depend on the batch around it (the experts' matmuls are grouped by
expert across the batch), the routing picks and weighs the experts as a float64 reference of
llama.cpp's build_moe_ffn does, hostile expert metadata and tensors are refused by name, and
GPU layers are refused (MoE layers run on the CPU). The whole model is held to transformers in
test_archs.py and to llama.cpp in benchmarks/arch_crosscheck.py."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import gguf
import numpy as np
import pytest

from localllm import _core
from localllm.plan import plan_layers

# 2 layers, n_embd 64, 4 heads of 16 (2 kv heads), 8 experts of width 32, 3 per token, vocab 64.
D, H, HKV, HD, E, K, FE, V, LAYERS = 64, 4, 2, 16, 8, 3, 32, 64, 2


def moe_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """numpy order: ggml's [ne0, ne1, ne2] reversed (experts outermost)."""
    t = {"token_embd.weight": rng.standard_normal((V, D)), "output_norm.weight": np.ones(D)}
    for il in range(LAYERS):
        p = f"blk.{il}."
        t |= {p + "attn_norm.weight": np.ones(D), p + "ffn_norm.weight": np.ones(D),
              p + "attn_q_norm.weight": np.ones(HD), p + "attn_k_norm.weight": np.ones(HD),
              p + "attn_q.weight": rng.standard_normal((H * HD, D)) * 0.1,
              p + "attn_k.weight": rng.standard_normal((HKV * HD, D)) * 0.1,
              p + "attn_v.weight": rng.standard_normal((HKV * HD, D)) * 0.1,
              p + "attn_output.weight": rng.standard_normal((D, H * HD)) * 0.1,
              p + "ffn_gate_inp.weight": rng.standard_normal((E, D)) * 0.3,
              p + "ffn_gate_exps.weight": rng.standard_normal((E, FE, D)) * 0.1,
              p + "ffn_up_exps.weight": rng.standard_normal((E, FE, D)) * 0.1,
              p + "ffn_down_exps.weight": rng.standard_normal((E, D, FE)) * 0.1}
    return {k: v.astype(np.float32) for k, v in t.items()}


def write_moe(path: Path, tensors: dict[str, np.ndarray], n_expert: int = E, n_used: int = K,
              configure: Callable[[gguf.GGUFWriter], None] | None = None,
              qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32) -> Path:
    """A qwen3moe GGUF of these tensors, its matrices (not the router) stored as ``qtype``."""
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(LAYERS)
    w.add_embedding_length(D)
    w.add_feed_forward_length(4 * D)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(FE)
    if configure:
        configure(w)
    for name, arr in tensors.items():
        if arr.ndim >= 2 and "gate_inp" not in name and qtype != gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory) -> Path:
    return write_moe(tmp_path_factory.mktemp("moe") / "moe.gguf", moe_tensors(np.random.default_rng(0)))


@pytest.fixture(scope="module")
def moe_q8_file(tmp_path_factory) -> Path:
    return write_moe(tmp_path_factory.mktemp("moe") / "moe-q8_0.gguf", moe_tensors(np.random.default_rng(0)),
                     qtype=gguf.GGMLQuantizationType.Q8_0)


def run(m: _core.Model, seqs: list[list[int]]) -> list[np.ndarray]:
    """Logits of every token of each sequence, all sequences in one forward."""
    tokens = np.asarray([t for s in seqs for t in s], np.int32)
    positions = np.asarray([i for s in seqs for i in range(len(s))], np.int32)
    seq_of = np.asarray([j for j, s in enumerate(seqs) for _ in s], np.int32)
    per = 4
    tables = np.arange(len(seqs) * per, dtype=np.int32).reshape(len(seqs), per) + 1   # block 0 unused
    out = m.forward(tokens, positions, seq_of, tables, np.arange(len(tokens), dtype=np.int32))
    bounds = np.cumsum([0] + [len(s) for s in seqs])
    return [out[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("which", ["moe_file", "moe_q8_file"])
def test_logits_do_not_depend_on_the_batch(which, request):
    rng = np.random.default_rng(1)
    a, b, c = ([int(x) for x in rng.integers(0, V, n)] for n in (11, 7, 23))
    m = _core.Model(str(request.getfixturevalue(which)), 2, 16, 16)
    alone = run(m, [a])[0]
    together = run(m, [b, a, c])[1]
    assert np.array_equal(alone, together)


def reference_moe(x: np.ndarray, t: dict[str, np.ndarray], il: int) -> np.ndarray:
    """float64 build_moe_ffn: softmax over experts, top K, weights renormalized, SwiGLU experts,
    weighted sum."""
    p = f"blk.{il}."
    logits = x @ t[p + "ffn_gate_inp.weight"].T.astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for i, row in enumerate(x):
        top = np.argsort(-probs[i])[:K]
        w = probs[i, top] / probs[i, top].sum()
        for e, we in zip(top, w):
            g = t[p + "ffn_gate_exps.weight"][e] @ row
            u = t[p + "ffn_up_exps.weight"][e] @ row
            out[i] += we * (t[p + "ffn_down_exps.weight"][e] @ (g / (1 + np.exp(-g)) * u))
    return out


def test_moe_layers_match_a_float64_reference(tmp_path):
    """With the attention's output projection zeroed, each layer adds only its MoE FFN of the
    RMS-normalized residual; the logits are the final norm projected by the tied embedding."""
    t = moe_tensors(np.random.default_rng(4))
    for il in range(LAYERS):
        t[f"blk.{il}.attn_output.weight"][:] = 0
    path = write_moe(tmp_path / "one.gguf", t)
    ids = [int(i) for i in np.random.default_rng(5).integers(0, V, 9)]
    ours = run(_core.Model(str(path), 1, 16, 16), [ids])[0]
    x = t["token_embd.weight"][ids].astype(np.float64)
    for il in range(LAYERS):
        h = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
        x = x + reference_moe(h, t, il)
    h = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    ref = h @ t["token_embd.weight"].T.astype(np.float64)
    err = np.linalg.norm(ours - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert err.max() < 1e-4, err


@pytest.mark.parametrize("n_expert,n_used,match", [
    (8, 9, r"expert_used_count in \[1, expert_count = 8\], got 9"),
    (8, 0, r"expert_used_count in \[1, expert_count = 8\], got 0"),
    (0, 2, r"expert_count in \[1, 4096\], got 0"),
])
def test_bad_expert_counts_are_refused(tmp_path, n_expert, n_used, match):
    path = write_moe(tmp_path / "bad.gguf", moe_tensors(np.random.default_rng(0)), n_expert, n_used)
    with pytest.raises(ValueError, match=match):
        _core.Model(str(path), 1, 4, 16)


def test_expert_tensors_of_the_wrong_shape_are_refused(tmp_path):
    t = moe_tensors(np.random.default_rng(0))
    t["blk.1.ffn_up_exps.weight"] = t["blk.1.ffn_up_exps.weight"][:E - 1]        # one expert short
    with pytest.raises(ValueError, match=r"'blk.1.ffn_up_exps.weight' has shape \[64, 32, 7\], expected "
                                         r"\[64, 32, 8\] \(a 3-D \[row, rows, experts\] tensor\)"):
        _core.Model(str(write_moe(tmp_path / "short.gguf", t)), 1, 4, 16)
    t = moe_tensors(np.random.default_rng(0))
    del t["blk.0.ffn_down_exps.weight"]
    with pytest.raises(ValueError, match="lacks tensor 'blk.0.ffn_down_exps.weight'"):
        _core.Model(str(write_moe(tmp_path / "missing.gguf", t)), 1, 4, 16)
    t = moe_tensors(np.random.default_rng(0))
    del t["blk.0.ffn_gate_inp.weight"]
    with pytest.raises(ValueError, match="lacks tensor 'blk.0.ffn_gate_inp.weight'"):
        _core.Model(str(write_moe(tmp_path / "norouter.gguf", t)), 1, 4, 16)


def test_experts_in_a_dense_model_are_refused(tmp_path):
    from test_weights import tiny_tensors, write_model
    t = tiny_tensors(np.random.default_rng(0))
    t["blk.0.ffn_up_exps.weight"] = np.zeros((4, 128, 64), np.float32)
    with pytest.raises(ValueError, match="'blk.0.ffn_up_exps.weight' holds experts, but the metadata's "
                                         "expert_count is 0"):
        _core.Model(str(write_model(tmp_path / "dense.gguf", t)), 1, 4, 16)


def test_gpu_layers_are_refused_and_auto_plans_none(moe_file):
    with pytest.raises(ValueError, match=r"mixture-of-experts models \(qwen3moe\) run on the CPU only"):
        _core.Model(str(moe_file), 1, 4, 16, n_gpu_layers=1)
    fp = _core.Footprint(str(moe_file))
    assert fp.n_layer == LAYERS and fp.gpu_layers_max == 0
    plan = plan_layers(fp.bytes, fp.n_layer, "auto", n_ctx=64, kv_block_size=16, n_batch=32,
                       gpu_free=80 << 30, gpu_layers_max=fp.gpu_layers_max)
    assert plan.n_gpu_layers == 0 and "CPU only" in plan.notes[-1]
    with pytest.raises(ValueError, match="run on the CPU only"):
        plan_layers(fp.bytes, fp.n_layer, 1, n_ctx=64, kv_block_size=16, n_batch=32,
                    gpu_free=80 << 30, gpu_layers_max=fp.gpu_layers_max)


def test_hparams(moe_file):
    hp = _core.Model(str(moe_file), 1, 4, 16).hparams
    assert (hp["arch"], hp["n_expert"], hp["n_expert_used"], hp["n_ff_exp"]) == ("qwen3moe", E, K, FE)
