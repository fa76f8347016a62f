"""Phi3ForCausalLM -> GGUF ``phi3`` (Phi-3, Phi-3.5, Phi-4-mini): llama layers whose Q, K and V
are one fused ``qkv_proj`` (-> ``attn_qkv``) and whose gate and up are one fused ``gate_up_proj``
(-> ``ffn_up``, gate rows first), as llama.cpp's converter writes them; HF's rotary layout is
kept (NeoX); ``partial_rotary_factor`` gives ``rope.dimension_count``. LongRoPE (the 128k
models' ``rope_scaling`` type longrope, or its old name su) is written as llama.cpp writes it:
``rope_factors_long`` / ``rope_factors_short`` F32 [rope_dims/2], the original context, and the
attention factor sqrt(1 + ln(s) / ln(original)) for s = max_position_embeddings / original."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import ArchConverter, CheckpointError, PlannedTensor, config_number, register

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

    def rope_dims(self) -> int:
        return int(self.hp.head_dim * config_number(self.config, "partial_rotary_factor", 1.0))

    def write_metadata(self, w) -> None:
        super().write_metadata(w)
        w.add_vocab_size(self.hp.vocab_size)
        w.add_rope_dimension_count(self.rope_dims())
        longrope = self.longrope()
        if longrope is not None:
            w.add_rope_scaling_orig_ctx_len(longrope["original"])
            w.add_rope_scaling_attn_factors(longrope["attn_factor"])

    def longrope(self) -> dict[str, Any] | None:
        """LongRoPE's parameters, checked; None for a checkpoint without rope scaling."""
        rope = self.rope_parameters()
        kind = (rope.get("rope_type") or "default").lower()
        if kind == "default":
            return None
        if kind not in ("longrope", "su"):
            raise ValueError(f"unsupported rope scaling type {kind!r} for phi3 (supported: longrope)")
        original = rope.get("original_max_position_embeddings", self.config.get("original_max_position_embeddings"))
        if isinstance(original, bool) or not isinstance(original, int) or original < 1:
            raise CheckpointError(f"config.json: LongRoPE needs original_max_position_embeddings, got {original!r:.40}")
        half = self.rope_dims() // 2
        factors = {}
        for name in ("long_factor", "short_factor"):
            f = rope.get(name)
            arr = np.asarray(f, dtype=np.float64) if isinstance(f, list) else None
            if arr is None or arr.shape != (half,) or not np.all(np.isfinite(arr)) or not np.all(arr > 0):
                raise CheckpointError(f"config.json: LongRoPE's {name} must be {half} positive numbers "
                                      f"(rope dims / 2), got {f!r:.60}")
            factors[name] = arr.astype(np.float32)
        scale = (self.hp.n_ctx or original) / original
        attn_factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
        given = rope.get("attention_factor")
        if given is not None and not math.isclose(config_number(rope, "attention_factor"), attn_factor, rel_tol=1e-6):
            raise CheckpointError(f"config.json: LongRoPE attention_factor={given!r:.40} differs from the one "
                                  f"GGUF readers compute ({attn_factor:.6f}); the file would run differently")
        return {"original": original, "attn_factor": attn_factor, **factors}

    def extra_tensors(self) -> list[PlannedTensor]:
        longrope = self.longrope()
        if longrope is None:
            return []
        long, short = longrope["long_factor"], longrope["short_factor"]
        return [PlannedTensor("rope_factors_long.weight", long.shape, None, make=lambda: long),
                PlannedTensor("rope_factors_short.weight", short.shape, None, make=lambda: short)]

    def expected_shape(self, gguf_suffix: str) -> tuple[int, ...] | None:
        hp = self.hp
        if gguf_suffix == "attn_qkv.weight":
            return ((hp.n_head + 2 * hp.n_head_kv) * hp.head_dim, hp.n_embd)
        if gguf_suffix == "ffn_up.weight":
            return (2 * hp.n_ff, hp.n_embd)
        return super().expected_shape(gguf_suffix)
