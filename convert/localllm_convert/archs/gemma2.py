"""Gemma2ForCausalLM -> GGUF ``gemma2``: gemma3's layout without the per-head Q/K norms, a
sliding window on every other layer, and the attention and final logit soft-capping values
(``attn_logit_softcapping``, ``final_logit_softcapping``) written as llama.cpp's keys."""
from __future__ import annotations

from .base import ArchConverter, config_number, register
from .gemma3 import Gemma3Converter

__all__ = ["Gemma2Converter"]


@register("Gemma2ForCausalLM")
class Gemma2Converter(Gemma3Converter):
    gguf_arch = "gemma2"
    swa_pattern = 2
    softcapping = True
    layer_tensors = {k: v for k, v in Gemma3Converter.layer_tensors.items()
                     if v not in ("attn_q_norm.weight", "attn_k_norm.weight")}

    def rope_parameters(self):
        params = ArchConverter.rope_parameters(self)
        params.setdefault("rope_theta", 10000.0)      # Gemma2Config's default (gemma3's is 1e6)
        return params

    def write_metadata(self, w) -> None:
        super().write_metadata(w)
        # None (no capping) is written as 0: the runtime's defaults, llama.cpp's, are 50 and 30.
        w.add_attn_logit_softcapping(config_number(self.config, "attn_logit_softcapping", 0.0))
        w.add_final_logit_softcapping(config_number(self.config, "final_logit_softcapping", 0.0))
