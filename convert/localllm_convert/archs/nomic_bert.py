"""NomicBertModel (transformers' own implementation) -> GGUF ``nomic-bert`` (nomic-embed-text),
with llama.cpp's keys and tensor names: BERT's post-norm encoder with rotary positions (HF's
rotate-half layout, which llama.cpp's nomic-bert graph rotates NeoX-style: no permutation), no
biases, a SwiGLU FFN, token types. The WordPiece vocabulary as bert's. Both tensor layouts are
read: the hub's (nomic's original code, which transformers also saves: ``emb_ln``,
``encoder.layers.N.attn.Wqkv`` (fused Q, K, V, kept fused as llama.cpp does), ``mlp.fc11`` (up),
``mlp.fc12`` (gate), ``norm1``/``norm2``) and transformers' module names."""
from __future__ import annotations

import re

from ..checkpoint import CheckpointError
from ..vocab import Vocab
from .base import ArchConverter, HParams, _int, config_number, register
from .bert import load_wordpiece_vocab, write_encoder_metadata

__all__ = ["NomicBertConverter"]

_LAYER_TENSORS = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "attn_output_norm.weight",
    "post_attention_layernorm.bias": "attn_output_norm.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "post_mlp_layernorm.weight": "layer_output_norm.weight", "post_mlp_layernorm.bias": "layer_output_norm.bias",
}
_HUB_LAYER_TENSORS = {
    "attn.Wqkv.weight": "attn_qkv.weight", "attn.out_proj.weight": "attn_output.weight",
    "norm1.weight": "attn_output_norm.weight", "norm1.bias": "attn_output_norm.bias",
    "mlp.fc11.weight": "ffn_up.weight", "mlp.fc12.weight": "ffn_gate.weight", "mlp.fc2.weight": "ffn_down.weight",
    "norm2.weight": "layer_output_norm.weight", "norm2.bias": "layer_output_norm.bias",
}
_MODEL_TENSORS = {
    "emb_ln.weight": "token_embd_norm.weight", "emb_ln.bias": "token_embd_norm.bias",
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}


@register("NomicBertModel")
class NomicBertConverter(ArchConverter):
    gguf_arch = "nomic-bert"
    prefix = ""

    def read_hparams(self) -> HParams:
        c = self.config
        if c.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"config.json: hidden_act {c['hidden_act']!r} is not supported (silu only)")
        n_head, n_embd = _int(c, "num_attention_heads"), _int(c, "hidden_size")
        head_dim = _int({"head_dim": c.get("head_dim") or n_embd // n_head}, "head_dim")
        if head_dim * n_head != n_embd:
            raise CheckpointError("config.json: head_dim x num_attention_heads must equal hidden_size")
        return HParams(n_layer=_int(c, "num_hidden_layers"), n_embd=n_embd, n_ff=_int(c, "intermediate_size"),
                       n_head=n_head, n_head_kv=n_head, head_dim=head_dim, vocab_size=_int(c, "vocab_size"),
                       n_ctx=_int(c, "max_position_embeddings"), rms_eps=config_number(c, "layer_norm_eps", 1e-12))

    def pooling(self) -> str | None:
        return super().pooling() or "mean"    # nomic-embed-text pools by the mean

    def write_metadata(self, w) -> None:
        hp, a = self.hp, self.gguf_arch
        rope = self.rope_parameters()
        if (rope.get("rope_type") or "default") != "default":
            raise CheckpointError(f"unsupported rope scaling type {rope.get('rope_type')!r} for nomic-bert")
        write_encoder_metadata(w, hp, a, self.config)
        w.add_rope_freq_base(config_number(rope, "rope_theta", 1000.0))

    def map_name(self, hf_name: str) -> str | None:
        if hf_name in _MODEL_TENSORS:
            return _MODEL_TENSORS[hf_name]
        m = re.match(r"(encoder\.)?layers\.(\d+)\.(.+)$", hf_name)
        table = _HUB_LAYER_TENSORS if m and m.group(1) else _LAYER_TENSORS
        if m and int(m.group(2)) < self.hp.n_layer and m.group(3) in table:
            return f"blk.{m.group(2)}.{table[m.group(3)]}"
        raise CheckpointError(f"unexpected tensor {hf_name!r} for {self.ckpt.architecture}")

    def expected(self, gguf_name: str) -> tuple[int, ...] | None:
        hp = self.hp
        d, ff = hp.n_embd, hp.n_ff
        if gguf_name == "token_embd.weight":
            return (hp.vocab_size, d)
        if not gguf_name.startswith("blk."):
            return None if gguf_name == "token_types.weight" else (d,)
        suffix = gguf_name.split(".", 2)[2]
        return {"ffn_gate.weight": (ff, d), "ffn_up.weight": (ff, d), "ffn_down.weight": (d, ff),
                "attn_qkv.weight": (3 * d, d)}.get(suffix, (d,) if "norm" in suffix else (d, d))

    def required_names(self) -> list[str]:
        hub = "emb_ln.weight" in self.ckpt.tensors
        names = ["token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias"]
        for i in range(self.hp.n_layer):
            names += [f"blk.{i}.{s}" for s in (_HUB_LAYER_TENSORS if hub else _LAYER_TENSORS).values()]
        return names

    def vocab(self) -> Vocab:
        if self._vocab is None:
            self._vocab = load_wordpiece_vocab(self.ckpt, self.hp.vocab_size)
        return self._vocab
