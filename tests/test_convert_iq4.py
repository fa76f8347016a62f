"""The IQ4_NL / IQ4_XS presets of the converter (`--type iq4_nl|iq4_xs`, `localllm quantize`):
llama.cpp's per-tensor rules for them, the bytes our quantizer writes (held to llama-quantize's
own in test_quants.py), and models in these types run against transformers on the file's own
weights as gguf-py dequantizes them.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from localllm import quants
from localllm_convert import quantize_gguf
from localllm_convert.filetypes import PRESETS, preset
from localllm_convert.quant_rules import choose_types
from test_convert import (checkpoint, converted, corpus_ids, field, hf_logits_with_file_weights,  # noqa: F401
                          llm_logits, out_dir, read_gguf, rel_err, tensor_bytes, tiny_checkpoint,
                          tiny_converted)

IQ4_PRESETS = ("iq4_nl", "iq4_xs")


def test_every_preset_is_a_type_the_registry_can_write():
    for p in PRESETS.values():
        info = quants.type_info(int(p.default_type))
        # IQ2_XXS / IQ2_XS quantize only with importance weights (their presets need an imatrix)
        writable = info["can_quantize"] or (info["importance_aware"] and info["needs_importance"])
        assert info["name"] == p.default_type.name and writable, p.name
    assert (PRESETS["iq4_nl"].ftype, PRESETS["iq4_xs"].ftype) == (25, 30)   # LLAMA_FTYPE_MOSTLY_IQ4_*


def _layer_tensors(n_layer: int, d: int, ff: int, kv: int) -> list[tuple[str, tuple[int, ...], QT]]:
    out = [("token_embd.weight", (1000, d), QT.F32), ("output_norm.weight", (d,), QT.F32)]
    for i in range(n_layer):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)),
                            ("attn_output", (d, d)), ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)),
                            ("ffn_down", (d, ff)), ("attn_norm", (d,))):
            out.append((f"blk.{i}.{name}.weight", shape, QT.F32))
    return out


@pytest.mark.parametrize("name", IQ4_PRESETS)
def test_iq4_rules_follow_llamacpp(name):
    """llama_tensor_get_type without an imatrix: tied embeddings -> Q6_K; attn_v -> Q5_K when
    n_head / n_head_kv >= 4; ffn_down of the first n_layer/8 layers -> Q5_K; IQ4_XS rows that
    are not whole 256-blocks -> IQ4_NL; the rest the preset's type."""
    p = preset(name)
    tensors = _layer_tensors(16, 512, 1536, 128)
    for n_gqa in (3, 4):
        got = {c.name: c.qtype for c in choose_types(tensors, p, 16, n_gqa)}
        assert got["token_embd.weight"] == QT.Q6_K and got["output_norm.weight"] == QT.F32
        for i in range(16):
            assert got[f"blk.{i}.attn_v.weight"] == (QT.Q5_K if n_gqa >= 4 else p.default_type)
            assert got[f"blk.{i}.ffn_down.weight"] == (QT.Q5_K if i < 2 else p.default_type)
            assert got[f"blk.{i}.attn_q.weight"] == p.default_type
    # 640-wide rows (Gemma 3 270M): IQ4_XS falls back to IQ4_NL, Q5_K to Q5_1; 576 % 256 != 0 too
    odd = {c.name: c for c in choose_types(_layer_tensors(8, 640, 2048, 256), p, 8, 4)}
    assert odd["blk.1.attn_q.weight"].qtype == QT.IQ4_NL
    assert odd["blk.1.attn_q.weight"].fallback_from == (QT.IQ4_XS if name == "iq4_xs" else None)
    assert odd["blk.0.attn_v.weight"].qtype == QT.Q5_1
    assert odd["blk.0.ffn_down.weight"].qtype == QT.Q5_K               # K = 2048 fits; 8 // 8 = 1 layer
    assert odd["blk.1.ffn_down.weight"].qtype == p.default_type
    assert odd["token_embd.weight"].qtype == QT.Q8_0                   # 640 % 256: Q8_0, not Q6_K


@pytest.mark.parametrize("name", IQ4_PRESETS)
def test_iq4_tiny_conversion_writes_the_quantizer_bytes_and_runs(name, tiny_converted, tmp_path):
    """Every tensor stored in the preset's type is our quantizer's output for the F32 conversion
    of that tensor; `localllm quantize` of the F32 file writes the same file; it loads and runs."""
    qtype = preset(name).default_type
    f32_file, direct = read_gguf(tiny_converted("f32")), read_gguf(tiny_converted(name))
    checked = 0
    for t in direct.tensors:
        if QT(t.type) != qtype:
            continue
        expected = quants.quantize(np.asarray(f32_file.tensor_data(t.name)), int(qtype))
        assert np.array_equal(tensor_bytes(direct, t.name), expected.reshape(-1)), t.name
        checked += 1
    assert checked == 4 * 7                    # tiny llama: n_gqa 2, 4 layers (4 // 8 = 0)
    assert field(direct, "general.file_type") == preset(name).ftype
    out = tmp_path / "requant.gguf"
    quantize_gguf(tiny_converted("f32"), out, name, progress=False)
    again = read_gguf(out)
    for t in direct.tensors:
        assert np.array_equal(tensor_bytes(again, t.name), tensor_bytes(direct, t.name)), t.name
    from localllm import LLM
    assert np.isfinite(LLM(str(tiny_converted(name)), n_ctx=32).logits([1, 2, 3])).all()


@pytest.mark.parametrize("name", ["qwen2", "gemma3"])
@pytest.mark.parametrize("type_", IQ4_PRESETS)
def test_iq4_random_models_compute_their_weights(name, type_, converted):
    """As test_convert's q4_k_m check: against transformers running the file's own weights
    (dequantized by gguf-py, an independent reader of IQ4), what is left is the runtime's own
    arithmetic (8-bit activations, F16 KV cache) on chaotic random weights."""
    path = converted(name, type_)
    types = {QT(t.type) for t in read_gguf(path).tensors}
    assert preset(type_).default_type in types or QT.IQ4_NL in types
    ids = corpus_ids(path, 64)
    ours = llm_logits(path, ids)
    assert np.isfinite(ours).all()
    err = rel_err(ours, hf_logits_with_file_weights(name, path, ids))
    print(f"{name} {type_}: relative logit error against the file's own weights {err:.4f}")
    assert err <= 0.12


@pytest.mark.parametrize("name", ["q4_k_m", "q4_k_s", "iq4_xs", "q4_0", "q5_k_m"])
def test_eight_expert_rules_follow_llamacpp(name):
    """llama_tensor_get_type for a model of exactly 8 experts: attn_v and attn_k -> Q8_0 under
    every preset; attn_output -> Q5_K under q4_k_s, q4_k_m, iq4_nl and iq4_xs. Other expert
    counts (Qwen3-30B-A3B's 128) and dense models keep the dense rules."""
    p = preset(name)
    tensors = _layer_tensors(16, 512, 1536, 128)
    dense = {c.name: c.qtype for c in choose_types(tensors, p, 16, 4)}
    assert {c.name: c.qtype for c in choose_types(tensors, p, 16, 4, n_expert=128)} == dense
    moe8 = {c.name: c.qtype for c in choose_types(tensors, p, 16, 4, n_expert=8)}
    for i in range(16):
        assert moe8[f"blk.{i}.attn_v.weight"] == moe8[f"blk.{i}.attn_k.weight"] == QT.Q8_0
        assert moe8[f"blk.{i}.attn_output.weight"] == (QT.Q5_K if name in ("q4_k_m", "q4_k_s", "iq4_xs")
                                                        else p.default_type)
        assert moe8[f"blk.{i}.ffn_down.weight"] == dense[f"blk.{i}.ffn_down.weight"]
