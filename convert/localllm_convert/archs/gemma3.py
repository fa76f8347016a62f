"""Gemma3ForCausalLM (text only) -> GGUF ``gemma3``.

Differences from llama: sandwich norms (post-attention and post-FFN), per-head Q/K norms, a
SentencePiece vocabulary, and HF's ``Gemma3RMSNorm`` scaling by (1 + weight), so every norm
weight is written +1 (llama.cpp multiplies by the weight itself). Embedding rows past the
tokenizer's vocabulary are dropped, as llama.cpp's converter does.
"""
from __future__ import annotations

import logging

import gguf

from ..checkpoint import CheckpointError
from .base import ArchConverter, PlannedTensor, config_number, register, rope_number

__all__ = ["Gemma3Converter", "SWA_PATTERN"]

log = logging.getLogger("localllm_convert")

# llama.cpp's gemma3 graph: every 6th layer is global, the others use the sliding window.
SWA_PATTERN = 6


@register("Gemma3ForCausalLM")
class Gemma3Converter(ArchConverter):
    gguf_arch = "gemma3"
    layer_tensors = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight",
        "pre_feedforward_layernorm.weight": "ffn_norm.weight",
        "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }

    swa_pattern = SWA_PATTERN
    softcapping = False        # gemma2 soft-caps attention scores and logits; gemma3 does not

    def read_hparams(self):
        c = self.config
        arch = self.gguf_arch
        if not self.softcapping:
            for key in ("attn_logit_softcapping", "final_logit_softcapping"):
                if c.get(key) is not None:
                    raise CheckpointError(f"{arch} with {key} is not supported")
        if not isinstance(c.get("sliding_window"), int):
            raise CheckpointError(f"config.json: {arch} needs an integer sliding_window")
        layer_types = c.get("layer_types")
        if layer_types is not None and not isinstance(layer_types, list):
            raise CheckpointError(f"config.json: layer_types must be a list, got {layer_types!r:.40}")
        if layer_types:
            expect = ["full_attention" if (i + 1) % self.swa_pattern == 0 else "sliding_attention"
                      for i in range(len(layer_types))]
            if list(layer_types) != expect:
                raise CheckpointError(f"config.json: {arch} layer_types must follow the "
                                      f"1-global-in-{self.swa_pattern} pattern llama.cpp assumes")
        c = {"head_dim": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
             "max_position_embeddings": 131072, **c}
        self.config = c
        hp = super().read_hparams()
        scalar = c.get("query_pre_attn_scalar")
        if scalar is not None and scalar != hp.head_dim:
            log.warning("query_pre_attn_scalar %s != head_dim %s: llama.cpp scales attention by "
                        "1/sqrt(head_dim)", scalar, hp.head_dim)
        return hp

    def rope_parameters(self):
        params = super().rope_parameters()
        params.setdefault("rope_theta", 1_000_000.0)
        return params

    def write_metadata(self, w) -> None:
        hp = self.hp
        w.add_context_length(int(hp.n_ctx))
        w.add_embedding_length(hp.n_embd)
        w.add_block_count(hp.n_layer)
        w.add_feed_forward_length(hp.n_ff)
        w.add_head_count(hp.n_head)
        w.add_layer_norm_rms_eps(hp.rms_eps)
        w.add_key_length(hp.head_dim)
        w.add_value_length(hp.head_dim)
        rope = self.rope_parameters()
        w.add_rope_freq_base(config_number(rope, "rope_theta"))
        w.add_sliding_window(int(self.config["sliding_window"]))
        w.add_head_count_kv(hp.n_head_kv)
        kind = rope.get("rope_type") or "default"
        if kind == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(float(rope_number(rope, "factor", kind)))
        elif kind != "default":
            raise CheckpointError(f"unsupported rope scaling type {kind!r} for {self.gguf_arch}")

    def vocab(self):
        if self.ckpt.file("tokenizer.model") is None:
            raise CheckpointError(f"{self.ckpt.dir} has no tokenizer.model: {self.gguf_arch} needs its "
                                  "SentencePiece model (Google's checkpoints ship it)")
        vocab = super().vocab()
        vocab.add_space_prefix = False
        return vocab

    def transform_for(self, gguf_name: str):
        if gguf_name.endswith("norm.weight"):
            return lambda w: w + 1.0       # Gemma3RMSNorm: x * (1 + weight)
        return None

    def finish_plan(self, planned: list[PlannedTensor]) -> list[PlannedTensor]:
        n_tokens = len(self.vocab().tokens)
        for p in planned:
            if p.name == "token_embd.weight" and p.shape[0] > n_tokens:
                p.shape = (n_tokens, *p.shape[1:])
                p.transform = lambda w, n=n_tokens: w[:n]
        return planned
