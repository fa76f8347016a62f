"""Output presets (``--type``) and the ggml tensor types they are built from.

A preset is llama.cpp's ``LLAMA_FTYPE``: the id recorded in ``general.file_type`` and the
tensor type most weights get (``llama_ftype_get_default_type``); the K-quant and IQ4 presets mix
types per tensor (see :mod:`localllm_convert.quant_rules`).

Block sizes come from the runtime's type registry (``localllm.quants.type_info``, the C++ table
in csrc/backends/cpu/quants/type_registry.cpp) when the native core is built, else from gguf-py's table (the
converter then writes only float and legacy types, see ``arrays.quantize_rows``).
"""
from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

__all__ = ["Preset", "PRESETS", "preset", "QT", "block_elems", "row_nbytes", "is_quantized",
           "FLOAT_TYPES", "QUANTIZATION_VERSION"]

# general.quantization_version: the block layout version of ggml's quantized types.
QUANTIZATION_VERSION = 2

FLOAT_TYPES = (QT.F32, QT.F16, QT.BF16)


@dataclass(frozen=True)
class Preset:
    name: str           # what the user types: "q4_k_m"
    ftype: int          # LLAMA_FTYPE id written to general.file_type
    default_type: QT    # the type of most 2-D weights

    @property
    def quantized(self) -> bool:
        return is_quantized(self.default_type)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("f32", 0, QT.F32),
    Preset("f16", 1, QT.F16),
    Preset("bf16", 32, QT.BF16),
    Preset("q8_0", 7, QT.Q8_0),
    Preset("q4_0", 2, QT.Q4_0),
    Preset("q4_1", 3, QT.Q4_1),
    Preset("q5_0", 8, QT.Q5_0),
    Preset("q5_1", 9, QT.Q5_1),
    Preset("q2_k", 10, QT.Q2_K),
    Preset("q2_k_s", 21, QT.Q2_K),
    Preset("q3_k_s", 11, QT.Q3_K),
    Preset("q3_k_m", 12, QT.Q3_K),
    Preset("q3_k_l", 13, QT.Q3_K),
    Preset("q4_k_s", 14, QT.Q4_K),
    Preset("q4_k_m", 15, QT.Q4_K),
    Preset("q5_k_s", 16, QT.Q5_K),
    Preset("q5_k_m", 17, QT.Q5_K),
    Preset("q6_k", 18, QT.Q6_K),
    Preset("iq4_nl", 25, QT.IQ4_NL),
    Preset("iq4_xs", 30, QT.IQ4_XS),
    # Low-bit i-quants (llama_ftype_get_default_type: iq2_s's default is IQ2_XS, iq2_m's IQ2_S,
    # iq3_xs's IQ3_S); iq2_*, iq3_xxs and iq3_xs need an importance matrix.
    Preset("iq2_xxs", 19, QT.IQ2_XXS),
    Preset("iq2_xs", 20, QT.IQ2_XS),
    Preset("iq2_s", 28, QT.IQ2_XS),
    Preset("iq2_m", 29, QT.IQ2_S),
    Preset("iq3_xxs", 23, QT.IQ3_XXS),
    Preset("iq3_xs", 22, QT.IQ3_S),
    Preset("iq3_s", 26, QT.IQ3_S),
    Preset("iq3_m", 27, QT.IQ3_S),
)}


def preset(name: str) -> Preset:
    """The preset called ``name`` (case-insensitive); ValueError listing the choices otherwise."""
    key = str(name).lower()
    if key not in PRESETS:
        raise ValueError(f"unknown output type {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[key]


def _block(qtype: QT) -> tuple[int, int]:
    """(elements, bytes) of one block: the type registry's, or gguf-py's without the core."""
    try:
        from localllm import quants
    except ImportError:
        return GGML_QUANT_SIZES[QT(qtype)]
    info = quants.type_info(int(qtype))
    return info["block_elems"], info["block_bytes"]


def block_elems(qtype: QT) -> int:
    """Elements per block of ``qtype`` (1 for the float types)."""
    return _block(qtype)[0]


def row_nbytes(qtype: QT, n: int) -> int:
    """Bytes taken by ``n`` elements of ``qtype`` (``n`` a multiple of the block size)."""
    elems, nbytes = _block(qtype)
    if n % elems:
        raise ValueError(f"{n} elements is not a multiple of the {QT(qtype).name} block size {elems}")
    return n // elems * nbytes


def is_quantized(qtype: QT) -> bool:
    """Block-quantized (as opposed to F32/F16/BF16 and the integer types)."""
    return block_elems(qtype) > 1
