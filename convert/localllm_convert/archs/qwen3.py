"""Qwen3ForCausalLM -> GGUF ``qwen3`` (dense Qwen3): the qwen2 layout with per-head Q/K RMSNorm
weights, an explicit head_dim, and Q/K/V biases only when ``attention_bias`` is set; HF's rotary
layout is kept (llama.cpp's qwen3 graph rotates NeoX-style)."""
from __future__ import annotations

from .base import register
from .qwen2 import Qwen2Converter

__all__ = ["Qwen3Converter"]


@register("Qwen3ForCausalLM")
class Qwen3Converter(Qwen2Converter):
    gguf_arch = "qwen3"
    layer_tensors = {
        **Qwen2Converter.layer_tensors,
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
    }
    optional_layer_tensors = ("attn_q.bias", "attn_k.bias", "attn_v.bias")
