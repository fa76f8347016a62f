"""Phi3ForCausalLM -> GGUF ``phi3`` (Phi-3, Phi-3.5, Phi-4-mini): llama layers whose Q, K and V
are one fused ``qkv_proj`` (-> ``attn_qkv``) and whose gate and up are one fused ``gate_up_proj``
(-> ``ffn_up``, gate rows first), as llama.cpp's converter writes them; HF's rotary layout is
kept (NeoX); ``partial_rotary_factor`` gives ``rope.dimension_count``. LongRoPE checkpoints
(``rope_scaling.type`` longrope, the 128k models) are refused: the runtime does not implement it."""
from __future__ import annotations

from .base import ArchConverter, register

__all__ = ["Phi3Converter"]


@register("Phi3ForCausalLM")
class Phi3Converter(ArchConverter):
    gguf_arch = "phi3"
    layer_tensors = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.qkv_proj.weight": "attn_qkv.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }

    def write_metadata(self, w) -> None:
        super().write_metadata(w)
        w.add_vocab_size(self.hp.vocab_size)
        partial = float(self.config.get("partial_rotary_factor", 1.0))
        w.add_rope_dimension_count(int(self.hp.head_dim * partial))
        kind = self.rope_parameters().get("rope_type") or "default"
        if kind != "default":
            raise ValueError(f"unsupported rope scaling type {kind!r} for phi3 (LongRoPE is not implemented)")

    def expected_shape(self, gguf_suffix: str) -> tuple[int, ...] | None:
        hp = self.hp
        if gguf_suffix == "attn_qkv.weight":
            return ((hp.n_head + 2 * hp.n_head_kv) * hp.head_dim, hp.n_embd)
        if gguf_suffix == "ffn_up.weight":
            return (2 * hp.n_ff, hp.n_embd)
        return super().expected_shape(gguf_suffix)
