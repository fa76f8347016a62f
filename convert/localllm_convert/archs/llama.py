"""LlamaForCausalLM / MistralForCausalLM -> GGUF ``llama`` (Llama 2/3, SmolLM2, Mistral).

llama.cpp's llama graph applies rotary embeddings to adjacent pairs (x0, x1), (x2, x3), ...
while HF's Llama rotates the two halves of each head (x_i, x_{i+d/2}). The Q and K projection
rows are therefore permuted per head so that row pairs become adjacent: within each head the
rows [0 .. d/2) and [d/2 .. d) are interleaved.
"""
from __future__ import annotations

import math

import gguf
import numpy as np

from .base import ArchConverter, PlannedTensor, config_number, register, rope_number, write_yarn

__all__ = ["LlamaConverter", "permute_rotary_rows"]


def permute_rotary_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF half-rotation layout -> llama.cpp pair layout for Q/K rows. w: [n_head*d, ...]."""
    rows = w.shape[0]
    head_dim = rows // n_head
    # [n_head, 2 halves, d/2, ...] -> [n_head, d/2, 2, ...]: row j of half h goes to 2*j + h
    return (w.reshape(n_head, 2, head_dim // 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(rope: dict, head_dim: int) -> np.ndarray:
    """Per-frequency scaling factors of Llama 3.1's "llama3" rope type ([head_dim/2] f32)."""
    base = config_number(rope, "rope_theta")
    factor = config_number(rope, "factor", 8.0)
    low, high = config_number(rope, "low_freq_factor", 1.0), config_number(rope, "high_freq_factor", 4.0)
    old_ctx = config_number(rope, "original_max_position_embeddings", 8192)
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


@register("LlamaForCausalLM", "MistralForCausalLM")
class LlamaConverter(ArchConverter):
    gguf_arch = "llama"

    def write_metadata(self, w) -> None:
        super().write_metadata(w)
        w.add_vocab_size(self.hp.vocab_size)
        w.add_rope_dimension_count(self.hp.head_dim)
        rope = self.rope_parameters()
        kind = rope.get("rope_type") or "default"
        if kind == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(float(rope_number(rope, "factor", kind)))
        elif kind == "yarn":
            write_yarn(w, rope)
        elif kind not in ("default", "llama3"):
            raise ValueError(f"unsupported rope scaling type {kind!r} for llama")

    def transform_for(self, gguf_name: str):
        if gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
            return lambda w: permute_rotary_rows(w, self.hp.n_head)
        if gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
            return lambda w: permute_rotary_rows(w, self.hp.n_head_kv)
        return None

    def extra_tensors(self) -> list[PlannedTensor]:
        rope = self.rope_parameters()
        if (rope.get("rope_type") or "") != "llama3":
            return []
        factors = llama3_rope_factors(rope, self.hp.head_dim)
        return [PlannedTensor("rope_freqs.weight", factors.shape, None, make=lambda: factors)]
