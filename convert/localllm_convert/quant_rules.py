"""Which ggml type each tensor gets under a preset: llama.cpp's rules (src/llama-quant.cpp,
``llama_tensor_get_type``) for the presets this converter offers, with or without an imatrix.

* Only 2-D (or higher) tensors whose name ends in ``weight`` and that are not norms get quantized;
  the rest keep their type (F32 when converting from a checkpoint).
* ``output.weight`` — and ``token_embd.weight`` when the embeddings are tied (no output.weight) —
  goes to Q6_K (Q8_0 when its rows do not split into blocks of the default type, or when the
  preset is q8_0 itself).
* attn_v (and a fused attn_qkv): q2_k -> Q4_K when n_gqa >= 4 (n_head / n_head_kv), else Q3_K;
  q2_k_s -> Q4_K when n_gqa >= 4; q3_k_m -> Q5_K in the first 2 layers, Q4_K after; q3_k_l ->
  Q5_K; iq4_nl / iq4_xs -> Q5_K when n_gqa >= 4; q4_k_m / q5_k_m -> Q6_K in the layers
  ``use_more_bits`` picks (the first and last eighth, and every third layer between); q4_k_s ->
  Q5_K in the first 4 layers.
* ffn_down: q2_k -> Q3_K; q2_k_s -> Q4_K in the first eighth of the layers; q3_k_m -> Q5_K in
  the first sixteenth, Q4_K after; q3_k_l -> Q5_K; q4_k_m / q5_k_m -> Q6_K where
  ``use_more_bits``; iq4_nl / iq4_xs without an imatrix -> Q5_K in the first eighth; q4_k_s ->
  Q5_K in the first eighth; q4_0 / q5_0 with an imatrix -> Q4_1 / Q5_1 in the first eighth.
* attn_output: q2_k -> Q3_K, q3_k_m -> Q4_K, q3_k_l -> Q5_K.
* Models of exactly 8 experts (llama.cpp's rules for Mixtral-shaped MoE): attn_v and attn_k go
  to Q8_0, attn_output to Q5_K under q2_k, q3_k_s, q3_k_m, q4_k_s, q4_k_m, iq4_nl and iq4_xs.
* The low-bit i-quant presets (iq2_xxs ... iq3_m): :mod:`localllm_convert.quant_rules_iq`.
* A row length that is not a multiple of the chosen block size falls back: Q2_K / Q3_K -> Q4_0,
  Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS and the low-bit i-quants -> IQ4_NL, and to F16
  when even that does not fit (llama.cpp stops with an error for the legacy types there; the converter writes F16 as
  convert_hf_to_gguf.py does).
* ``requires_imatrix``: the low-bit i-quant tensors, and the Q2_K tensors of a q2_k_s file (but token_embd and output), need an
  imatrix, as llama-quantize refuses them without one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .filetypes import QT, Preset, block_elems
from .quant_rules_iq import IQ_LOWBIT_PRESETS, Q5K_OUTPUT_PRESETS, iq_lowbit_token_embd, iq_lowbit_type

__all__ = ["TensorChoice", "choose_types", "use_more_bits", "allows_quantization", "category",
           "requires_imatrix", "check_importance"]

_K_FALLBACK = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0,
               QT.Q2_K: QT.Q4_0, QT.Q3_K: QT.Q4_0, QT.IQ4_XS: QT.IQ4_NL,
               **{t: QT.IQ4_NL for t in (QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S)}}
_IQ4_PRESETS = ("iq4_nl", "iq4_xs")

# Substrings of tensor names that are never quantized (besides 1-D tensors and norms).
_NEVER_QUANTIZED = ("_norm.weight", "ffn_gate_inp.weight", "position_embd", "token_types",
                    "ssm_conv1d")

_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class TensorChoice:
    name: str
    qtype: QT
    fallback_from: QT | None = None   # the type the rules chose before a row-length fallback


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of layers that get more bits in the _M presets."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or \
        (i_layer - n_layers // 8) % 3 == 2


def allows_quantization(name: str, n_dims: int) -> bool:
    """Whether llama.cpp would quantize a tensor of this name and rank at all."""
    if n_dims < 2 or not name.endswith("weight"):
        return False
    return not any(s in name for s in _NEVER_QUANTIZED)


def category(name: str) -> str:
    """The rule category of a GGUF tensor name (llama.cpp's tensor_get_category)."""
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for key in ("attn_qkv.weight", "attn_v.weight", "attn_k.weight", "attn_q.weight",
                "attn_output.weight"):
        if key in name:
            return key.split(".")[0]
    for key in ("ffn_up", "ffn_gate", "ffn_down"):
        if key in name:
            return key
    return "other"


def _layer_of(name: str) -> int:
    m = _LAYER.match(name)
    if not m:
        raise ValueError(f"cannot tell the layer of tensor {name!r}")
    return int(m.group(1))


def _attn_v_type(i: int, preset: Preset, n_layer: int, n_gqa: int) -> QT | None:
    """attn_v / attn_qkv of layer i (llama.cpp counts attn_v tensors in layer order: the same)."""
    name = preset.name
    if name == "q2_k":
        return QT.Q4_K if n_gqa >= 4 else QT.Q3_K
    if name == "q2_k_s" and n_gqa >= 4:
        return QT.Q4_K
    if name == "q3_k_m":
        return QT.Q5_K if i < 2 else QT.Q4_K
    if name == "q3_k_l":
        return QT.Q5_K
    if name in _IQ4_PRESETS and n_gqa >= 4:
        return QT.Q5_K
    if name in ("q4_k_m", "q5_k_m") and use_more_bits(i, n_layer):
        return QT.Q6_K
    if name == "q4_k_s" and i < 4:
        return QT.Q5_K
    return None


def _ffn_down_type(i: int, preset: Preset, n_layer: int, has_imatrix: bool) -> QT | None:
    name = preset.name
    if name == "q2_k":
        return QT.Q3_K
    if name == "q2_k_s":
        return QT.Q4_K if i < n_layer // 8 else None
    if name == "q3_k_m":
        return QT.Q5_K if i < n_layer // 16 else QT.Q4_K
    if name == "q3_k_l":
        return QT.Q5_K
    if name in ("q4_k_m", "q5_k_m"):
        return QT.Q6_K if use_more_bits(i, n_layer) else None
    if name in _IQ4_PRESETS and i < n_layer // 8 and not has_imatrix:
        return QT.Q5_K
    if name == "q4_k_s" and i < n_layer // 8:
        return QT.Q5_K
    if name in ("q4_0", "q5_0") and has_imatrix and i < n_layer // 8:
        return QT.Q4_1 if name == "q4_0" else QT.Q5_1
    return None


_ATTN_OUTPUT = {"q2_k": QT.Q3_K, "q3_k_m": QT.Q4_K, "q3_k_l": QT.Q5_K}
_EXPERT8_ATTN_OUTPUT = ("q2_k", "q3_k_s", "q3_k_m", "q4_k_s", "q4_k_m") + _IQ4_PRESETS


def _rule_type(name: str, ncols: int, preset: Preset, n_layer: int, n_gqa: int, tied: bool,
               n_expert: int = 0, has_imatrix: bool = False) -> QT:
    """The type before the row-length fallback (llama_tensor_get_type_impl, our presets)."""
    default = preset.default_type
    cat = category(name)
    if preset.name in IQ_LOWBIT_PRESETS and cat not in ("output", "token_embd"):
        layer = _layer_of(name) if cat.startswith(("attn_", "ffn_")) else None
        return iq_lowbit_type(preset.name, cat, layer, n_layer, n_gqa, n_expert, has_imatrix) or default
    if cat == "token_embd" and not tied and preset.name in IQ_LOWBIT_PRESETS:
        return iq_lowbit_token_embd(preset.name) or default
    if n_expert == 8 and cat in ("attn_v", "attn_qkv", "attn_k"):
        return QT.Q8_0
    if cat == "output" or (cat == "token_embd" and tied):
        if ncols % block_elems(default) != 0:
            return QT.Q8_0
        if preset.name in Q5K_OUTPUT_PRESETS:
            return QT.Q5_K
        return default if default == QT.Q8_0 else QT.Q6_K
    chosen = None
    if cat in ("attn_v", "attn_qkv"):
        chosen = _attn_v_type(_layer_of(name), preset, n_layer, n_gqa)
    elif cat == "ffn_down":
        chosen = _ffn_down_type(_layer_of(name), preset, n_layer, has_imatrix)
    elif cat == "attn_output":
        if n_expert == 8:
            chosen = QT.Q5_K if preset.name in _EXPERT8_ATTN_OUTPUT else None
        else:
            chosen = _ATTN_OUTPUT.get(preset.name)
    return default if chosen is None else chosen


def _fit_rows(qtype: QT, ncols: int) -> QT:
    """The fallback for rows that do not split into whole blocks of ``qtype``."""
    if ncols % block_elems(qtype) == 0:
        return qtype
    fallback = _K_FALLBACK.get(qtype, QT.F16)
    return fallback if ncols % block_elems(fallback) == 0 else QT.F16


# Types llama-quantize refuses to write without an importance matrix (llama-quant.cpp's
# tensor_requires_imatrix; token_embd and output are exempt).
NEEDS_IMPORTANCE = (QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS)


def requires_imatrix(name: str, qtype: QT, preset: Preset) -> bool:
    """Whether llama-quantize refuses to write this tensor as ``qtype`` without an imatrix
    (tensor_requires_imatrix): the low-bit i-quants, and Q2_K inside a q2_k_s file."""
    if category(name) in ("output", "token_embd"):
        return False
    return qtype in NEEDS_IMPORTANCE or (qtype == QT.Q2_K and preset.name == "q2_k_s")


def check_importance(choices: Sequence[TensorChoice], preset: Preset, has_imatrix: bool) -> None:
    """ValueError when a tensor would get a type that needs an importance matrix and there is none."""
    if has_imatrix:
        return
    needy = [c for c in choices if requires_imatrix(c.name, c.qtype, preset)]
    if needy:
        types = sorted({QT(c.qtype).name for c in needy})
        raise ValueError(f"output type {preset.name} needs an importance matrix: {len(needy)} tensors "
                         f"(e.g. {needy[0].name}) would be {', '.join(types)}, which llama.cpp quantizes "
                         "only with one: pass --imatrix FILE (make one with `localllm imatrix`), or choose "
                         "iq3_s, iq3_m, or a K-quant / iq4 type")


def choose_types(tensors: Sequence[tuple[str, Sequence[int], QT]], preset: Preset,
                 n_layer: int, n_gqa: int = 1, n_expert: int = 0,
                 has_imatrix: bool = False) -> list[TensorChoice]:
    """The type of every tensor under ``preset``.

    Args:
        tensors: (GGUF name, shape in numpy order — rows last, current type) of every tensor of
            the output file; the current type is what a tensor keeps when it is not quantized
            (pass F32 for checkpoint tensors, which are written as F32 then).
        preset: the output preset.
        n_layer: the model's block count (for the per-layer rules).
        n_gqa: query heads per K/V head, n_head / n_head_kv (llama.cpp's n_gqa(), layer 0).
        n_expert: the model's expert count ({arch}.expert_count; 0 for a dense model).
        has_imatrix: the weights will be quantized with an imatrix (some rules depend on it).
    """
    names = {name for name, _, _ in tensors}
    tied = "output.weight" not in names
    out = []
    for name, shape, current in tensors:
        if not allows_quantization(name, len(shape)):
            out.append(TensorChoice(name, QT(current)))
            continue
        if not preset.quantized:
            out.append(TensorChoice(name, preset.default_type))
            continue
        ncols = int(shape[-1])
        chosen = _rule_type(name, ncols, preset, n_layer, n_gqa, tied, n_expert, has_imatrix)
        fitted = _fit_rows(chosen, ncols)
        out.append(TensorChoice(name, fitted, chosen if fitted != chosen else None))
    return out
