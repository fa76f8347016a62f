"""Qwen2ForCausalLM -> GGUF ``qwen2`` (Qwen2, Qwen2.5): llama layers plus Q/K/V biases; HF's
rotary layout is kept (llama.cpp's qwen2 graph uses NEOX-style rotation), so no permutation."""
from __future__ import annotations

from .base import ArchConverter, register, write_yarn

__all__ = ["Qwen2Converter"]


@register("Qwen2ForCausalLM")
class Qwen2Converter(ArchConverter):
    gguf_arch = "qwen2"
    layer_tensors = {
        **ArchConverter.layer_tensors,
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias",
    }

    def write_metadata(self, w) -> None:
        super().write_metadata(w)
        rope = self.rope_parameters()
        kind = rope.get("rope_type") or "default"
        if kind == "yarn":
            write_yarn(w, rope)
        elif kind != "default":
            raise ValueError(f"unsupported rope scaling type {kind!r} for {self.gguf_arch}")
