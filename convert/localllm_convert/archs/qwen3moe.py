"""Qwen3MoeForCausalLM -> GGUF ``qwen3moe`` (Qwen3-30B-A3B, Qwen3-235B-A22B): the qwen3 attention
and, in every layer, a mixture of experts as llama.cpp's converter writes it: the router
``mlp.gate`` -> ``ffn_gate_inp`` (kept F32), and the experts' matrices stacked into 3-D
``ffn_{gate,up,down}_exps`` tensors [n_expert, rows, cols] (numpy order), from either HF layout:
one tensor per expert (``mlp.experts.E.gate_proj``) or the fused 3-D ``mlp.experts.gate_up_proj``
/ ``down_proj``. llama.cpp's qwen3moe graph always renormalizes the chosen experts' weights and
has a mixture of experts in every layer, so a checkpoint with ``norm_topk_prob`` false, dense
layers (``mlp_only_layers``, ``decoder_sparse_step`` > 1) or shared experts is refused rather than
converted into a file that would run differently."""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..arrays import to_float32
from ..checkpoint import TensorRef
from .base import CheckpointError, PlannedTensor, _int, register
from .qwen3 import Qwen3Converter

__all__ = ["Qwen3MoeConverter"]

_PER_EXPERT = re.compile(r"layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")
_FUSED = re.compile(r"layers\.(\d+)\.mlp\.experts\.(gate_up|down)_proj(\.weight)?$")


@register("Qwen3MoeForCausalLM")
class Qwen3MoeConverter(Qwen3Converter):
    gguf_arch = "qwen3moe"
    layer_tensors = {
        **{k: v for k, v in Qwen3Converter.layer_tensors.items() if not k.startswith("mlp.")},
        "mlp.gate.weight": "ffn_gate_inp.weight",
    }

    def __init__(self, checkpoint):
        super().__init__(checkpoint)
        c = self.config
        self.n_expert = _int(c, "num_experts" if "num_experts" in c else "num_local_experts")
        self.n_expert_used = _int(c, "num_experts_per_tok")
        self.n_ff_exp = _int(c, "moe_intermediate_size")
        if self.n_expert_used > self.n_expert:
            raise CheckpointError(f"config.json: num_experts_per_tok={self.n_expert_used} exceeds the "
                                  f"{self.n_expert} experts")
        unsupported: dict[str, Any] = {
            "norm_topk_prob": (c.get("norm_topk_prob", False), True),
            "decoder_sparse_step": (c.get("decoder_sparse_step", 1), 1),
            "mlp_only_layers": (c.get("mlp_only_layers") or [], []),
            "shared_expert_intermediate_size": (c.get("shared_expert_intermediate_size") or 0, 0)}
        for key, (value, wanted) in unsupported.items():
            if value != wanted:
                raise CheckpointError(f"config.json: {key}={value!r:.40} is not supported: GGUF's qwen3moe "
                                      f"graph runs as if {key}={wanted!r}")
        self._experts: dict[tuple[int, str], dict[int, TensorRef]] = {}

    def write_metadata(self, w) -> None:
        super().write_metadata(w)
        w.add_expert_count(self.n_expert)
        w.add_expert_used_count(self.n_expert_used)
        w.add_expert_feed_forward_length(self.n_ff_exp)

    def expected_shape(self, gguf_suffix: str) -> tuple[int, ...] | None:
        if gguf_suffix == "ffn_gate_inp.weight":
            return (self.n_expert, self.hp.n_embd)
        return super().expected_shape(gguf_suffix)

    def map_name(self, hf_name: str) -> str | None:
        name = hf_name[len(self.prefix):] if hf_name.startswith(self.prefix) else hf_name
        m = _PER_EXPERT.match(name) or _FUSED.match(name)
        if m and int(m.group(1)) < self.hp.n_layer:
            ref = self.ckpt.tensors[hf_name]
            if m.re is _PER_EXPERT:
                self._experts.setdefault((int(m.group(1)), m.group(3)), {})[int(m.group(2))] = ref
            else:
                self._experts.setdefault((int(m.group(1)), m.group(2) + "_fused"), {})[-1] = ref
            return None      # stacked by extra_tensors
        return super().map_name(hf_name)

    def extra_tensors(self) -> list[PlannedTensor]:
        out = []
        E, F, D = self.n_expert, self.n_ff_exp, self.hp.n_embd
        shapes = {"gate": (E, F, D), "up": (E, F, D), "down": (E, D, F)}
        for il in range(self.hp.n_layer):
            fused_gate_up = self._experts.get((il, "gate_up_fused"), {}).get(-1)
            fused_down = self._experts.get((il, "down_fused"), {}).get(-1)
            for kind, shape in shapes.items():
                name = f"blk.{il}.ffn_{kind}_exps.weight"
                fused = fused_down if kind == "down" else fused_gate_up
                if fused is not None:
                    out.append(self._from_fused(name, kind, fused, shape))
                else:
                    out.append(self._stacked(name, il, kind, shape))
        return out

    def _stacked(self, name: str, il: int, kind: str, shape: tuple[int, int, int]) -> PlannedTensor:
        refs = self._experts.get((il, kind), {})
        missing = [e for e in range(self.n_expert) if e not in refs]
        if missing:
            raise CheckpointError(f"the checkpoint lacks layer {il}'s {kind}_proj of expert(s) "
                                  f"{missing[:4]} (config.json: {self.n_expert} experts)")
        for e, ref in refs.items():
            if e >= self.n_expert or tuple(ref.shape) != shape[1:]:
                raise CheckpointError(f"expert tensor {ref.name} (expert {e}, shape {list(ref.shape)}) does not fit "
                                      f"config.json's {self.n_expert} experts of shape {list(shape[1:])}")
        ordered = [refs[e] for e in range(self.n_expert)]
        return PlannedTensor(name, shape, None,
                             make=lambda: np.stack([to_float32(r.read(), r.dtype) for r in ordered]))

    def _from_fused(self, name: str, kind: str, ref: TensorRef, shape: tuple[int, int, int]) -> PlannedTensor:
        E, F, D = self.n_expert, self.n_ff_exp, self.hp.n_embd
        want = (E, D, F) if kind == "down" else (E, 2 * F, D)
        if tuple(ref.shape) != want:
            raise CheckpointError(f"shape mismatch: {ref.name} is {list(ref.shape)} but config.json implies {list(want)}")
        rows = {"gate": slice(0, F), "up": slice(F, 2 * F), "down": slice(None)}[kind]
        return PlannedTensor(name, shape, None,
                             make=lambda: to_float32(ref.read(), ref.dtype)[:, rows, :])
