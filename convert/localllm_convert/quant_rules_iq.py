"""llama.cpp's per-tensor rules (src/llama-quant.cpp, ``llama_tensor_get_type_impl``) for the
low-bit i-quant presets: iq2_xxs, iq2_xs, iq2_s, iq2_m, iq3_xxs, iq3_xs, iq3_s and iq3_m.

* ``output.weight`` (and tied embeddings): Q5_K under iq2_* and iq3_xxs, else Q6_K.
* untied ``token_embd.weight``: Q2_K under iq2_xxs / iq2_xs, IQ3_S under iq2_s / iq2_m / iq3_xxs.
* iq2_*: attn_v -> Q4_K when n_gqa >= 4 or the model has >= 4 experts, else IQ3_S (iq2_s, iq2_m)
  or Q2_K; ffn_down of the first eighth of the layers likewise IQ3_S or Q2_K; attn_output ->
  IQ3_S under iq2_s / iq2_m (Q5_K with 8 experts); attn_k -> Q4_K with 8 experts.
* iq3_*: attn_v -> Q4_K when n_gqa >= 4 (always under iq3_m), else under iq3_xxs IQ3_XXS with an
  imatrix, IQ3_S without; attn_q / attn_k -> IQ3_XXS (iq3_xs) or IQ2_S (iq3_xxs); ffn_down of
  iq3_xxs without an imatrix -> Q4_K (first eighth) or Q3_K; of iq3_m -> Q4_K in the first
  eighth (and, with 8 experts, the use_more_bits layers); attn_output -> IQ3_S (iq3_xxs) or
  Q4_K (iq3_m), Q5_K with 8 experts; ffn_gate / ffn_up of the middle three quarters -> IQ3_XXS
  under iq3_xs. attn_qkv follows the attn_v rules; attn_v / attn_k -> Q8_0 with 8 experts.
Rows that do not split into blocks of 256 fall back to IQ4_NL (quant_rules._fit_rows).
"""
from __future__ import annotations

from .filetypes import QT

IQ2_PRESETS = ("iq2_xxs", "iq2_xs", "iq2_s", "iq2_m")
IQ3_PRESETS = ("iq3_xxs", "iq3_xs", "iq3_s", "iq3_m")
IQ_LOWBIT_PRESETS = IQ2_PRESETS + IQ3_PRESETS
# ftypes whose output tensor llama.cpp stores as Q5_K instead of Q6_K
Q5K_OUTPUT_PRESETS = IQ2_PRESETS + ("iq3_xxs",)


def _more_bits(i_layer: int, n_layers: int) -> bool:
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _iq2_type(name: str, cat: str, layer: int, n_layer: int, n_gqa: int, n_expert: int) -> QT | None:
    more = name in ("iq2_s", "iq2_m")
    if cat in ("attn_v", "attn_qkv"):
        return QT.Q4_K if n_gqa >= 4 or n_expert >= 4 else (QT.IQ3_S if more else QT.Q2_K)
    if cat == "attn_k" and n_expert == 8:
        return QT.Q4_K
    if cat == "ffn_down" and layer < n_layer // 8:
        return QT.IQ3_S if more else QT.Q2_K
    if cat == "attn_output":
        return QT.Q5_K if n_expert == 8 else (QT.IQ3_S if more else None)
    return None


def _iq3_type(name: str, cat: str, layer: int, n_layer: int, n_gqa: int, n_expert: int,
              has_imatrix: bool) -> QT | None:
    if cat in ("attn_v", "attn_qkv"):   # llama.cpp's attn_v rules cover attn_qkv too
        if n_expert == 8:
            return QT.Q8_0
        if name == "iq3_xxs":
            return QT.Q4_K if n_gqa >= 4 else (QT.IQ3_XXS if has_imatrix else QT.IQ3_S)
        return QT.Q4_K if name == "iq3_m" or n_gqa >= 4 else None
    if cat in ("attn_k", "attn_q"):
        if cat == "attn_k" and n_expert == 8:
            return QT.Q8_0
        return {"iq3_xs": QT.IQ3_XXS, "iq3_xxs": QT.IQ2_S}.get(name)
    if cat == "ffn_down":
        if name == "iq3_xxs" and not has_imatrix:
            return QT.Q4_K if layer < n_layer // 8 else QT.Q3_K
        if name == "iq3_m" and (layer < n_layer // 8 or (n_expert == 8 and _more_bits(layer, n_layer))):
            return QT.Q4_K
        return None
    if cat == "attn_output":
        if n_expert == 8:
            return QT.Q5_K
        return {"iq3_xxs": QT.IQ3_S, "iq3_m": QT.Q4_K}.get(name)
    if cat in ("ffn_gate", "ffn_up") and name == "iq3_xs" and n_layer // 8 <= layer < 7 * n_layer // 8:
        return QT.IQ3_XXS
    return None


def iq_lowbit_type(preset_name: str, cat: str, layer: int | None, n_layer: int, n_gqa: int,
                   n_expert: int, has_imatrix: bool) -> QT | None:
    """The type llama.cpp gives a tensor of category ``cat`` (not output / token_embd) under a
    low-bit i-quant preset; None: the preset's default type."""
    layer = -1 if layer is None else layer
    if preset_name in IQ2_PRESETS:
        return _iq2_type(preset_name, cat, layer, n_layer, n_gqa, n_expert)
    return _iq3_type(preset_name, cat, layer, n_layer, n_gqa, n_expert, has_imatrix)


def iq_lowbit_token_embd(preset_name: str) -> QT | None:
    """Untied token embeddings under a low-bit i-quant preset (None: the default type)."""
    if preset_name in ("iq2_xxs", "iq2_xs"):
        return QT.Q2_K
    if preset_name in ("iq2_s", "iq2_m", "iq3_xxs"):
        return QT.IQ3_S
    return None
