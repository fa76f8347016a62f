"""Conversions between float32 and ggml's tensor formats, bit-exact with ggml's reference code.

``dequantize`` turns the raw bytes of a GGUF tensor into float32, ``quantize`` does the
reverse exactly as ggml's ``quantize_row_*_ref`` (what ``llama-quantize`` runs without an
imatrix), so a converter built on it writes the same bytes as llama.cpp. Both run in C++
(``localllm._core``) with the GIL released, over a few threads for large inputs; the result never
depends on the threading.

Shapes follow numpy / gguf-py order: rows last. A quantized array has the same leading
dimensions as its float array and its last dimension in bytes.
"""
from __future__ import annotations

import enum
import math
from typing import Any, Sequence

import numpy as np

from . import _core

__all__ = [
    "GGMLType",
    "type_info",
    "row_bytes",
    "can_quantize",
    "dequantize",
    "quantize",
]


# ggml tensor type ids as stored in GGUF files, one member per type the C++ type registry
# (csrc/backends/cpu/quants/type_registry.cpp) supports; never renumbered: they are the file format.
GGMLType = enum.IntEnum("GGMLType", [(t["name"], t["id"]) for t in _core.types()])
GGMLType.__doc__ = "ggml tensor type ids this runtime supports (from the C++ type registry)."


def type_info(qtype: int) -> dict[str, Any]:
    """The type registry's entry of a type id.

    ``{"id", "name", "block_elems", "block_bytes", "quantized", "vec_dot_type" (the activation
    type id it is multiplied with), "can_quantize", "kernels" (ISA levels with a dot product
    written for it), "repackable"}``. Raises ValueError for an id this runtime does not support.
    """
    return _core.type_info(int(qtype))


def row_bytes(qtype: int, n: int) -> int:
    """Bytes taken by ``n`` elements of ``qtype``; ``n`` must be a multiple of its block size."""
    info = type_info(qtype)
    if n < 0 or n % info["block_elems"] != 0:
        raise ValueError(
            f"{n} elements is not a non-negative multiple of the {info['name']} block size "
            f"{info['block_elems']}"
        )
    return n // info["block_elems"] * info["block_bytes"]


def can_quantize(qtype: int) -> bool:
    """Whether :func:`quantize` supports float32 -> ``qtype``."""
    return bool(_core.can_quantize(int(qtype)))


def dequantize(data: Any, qtype: int, shape: Sequence[int]) -> np.ndarray:
    """Raw tensor bytes of type ``qtype`` -> float32 array of ``shape`` (numpy order, rows last).

    ``data`` may be any buffer or array (e.g. a GGUFReader tensor's ``data``); it is read as its
    raw bytes, whose count must be exactly what ``prod(shape)`` elements of ``qtype`` take.
    """
    shape = tuple(int(d) for d in shape)
    raw = np.ascontiguousarray(np.asarray(data)).view(np.uint8).reshape(-1)
    n_elements = math.prod(shape)
    if shape and n_elements and shape[-1] % type_info(qtype)["block_elems"] != 0:
        raise ValueError(
            f"row length {shape[-1]} is not a multiple of the {type_info(qtype)['name']} "
            f"block size {type_info(qtype)['block_elems']}"
        )
    return _core.dequantize(raw, int(qtype), n_elements).reshape(shape)


def quantize(array: Any, qtype: int, importance: Any = None) -> np.ndarray:
    """float32 array -> uint8 array of ``qtype`` blocks, shaped like gguf-py's (last dim in bytes).

    Each row (the last dimension, a multiple of the block size) is quantized independently,
    bit-exact with ggml's reference quantizer. Non-float32 input is converted to float32 first.
    ``importance``: one non-negative weight per column (an imatrix's mean squared activations,
    :meth:`localllm.imatrix.Imatrix.importance`): the rows are quantized as ``llama-quantize
    --imatrix`` does, byte for byte (types whose ggml quantizer ignores it give the same bytes
    as without).
    """
    x = np.asarray(array, dtype=np.float32)
    if x.ndim == 0:   # checked first: ascontiguousarray would turn a scalar into shape (1,)
        raise ValueError("quantize needs an array with at least one dimension")
    qw = None if importance is None else np.ascontiguousarray(importance, dtype=np.float32)
    return _core.quantize(np.ascontiguousarray(x), int(qtype), qw)
