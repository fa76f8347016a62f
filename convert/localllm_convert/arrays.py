"""Array conversions the converter needs: checkpoint bytes -> float32, float32 -> any output type.

``quantize_rows`` is the one place that calls a quantizer: ``localllm.quants.quantize`` (C++,
bit-exact with ggml's reference quantizers, releases the GIL) when the native core is built, else
gguf-py's ``gguf.quants.quantize`` (numpy; legacy types only). Rows are split into chunks that
the caller may run on several threads.
"""
from __future__ import annotations

import numpy as np

from .filetypes import QT, block_elems, is_quantized

__all__ = ["to_float32", "from_bf16_bits", "to_bf16_bits", "quantize_rows", "encode",
           "native_quantizer_available"]


def _native():
    try:
        from localllm import quants
    except ImportError:
        return None
    return quants


def native_quantizer_available() -> bool:
    """Whether the C++ quantizers (localllm._core) can be used."""
    return _native() is not None


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> uint16 bfloat16, round to nearest even; NaN stays a (quiet) NaN (as ggml)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    return np.where(nan, (bits >> 16) | 64, rounded).astype(np.uint16)


def to_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    """A checkpoint tensor as float32. ``raw`` holds F32/F16 values or BF16 bits (uint16)."""
    if dtype == "BF16":
        return from_bf16_bits(raw)
    if dtype in ("F16", "F32"):
        return raw.astype(np.float32, copy=False)
    raise ValueError(f"unsupported tensor dtype {dtype}")


def quantize_rows(x: np.ndarray, qtype: QT, importance: np.ndarray | None = None) -> np.ndarray:
    """float32 [..., n] -> uint8 [..., row bytes] of ``qtype`` blocks (one call, one thread);
    ``importance`` [n]: every row weighted by it (llama-quantize --imatrix)."""
    native = _native()
    if native is not None:
        return native.quantize(x, int(qtype), importance)
    if importance is not None:
        raise RuntimeError("quantizing with an imatrix needs the native core (localllm._core); build the project first")
    import gguf.quants
    if qtype not in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0):
        raise RuntimeError(f"quantizing to {QT(qtype).name} needs the native core "
                           "(localllm._core); build the project first")
    return gguf.quants.quantize(x, qtype)


def encode(x: np.ndarray, qtype: QT, importance: np.ndarray | None = None) -> np.ndarray:
    """float32 -> the stored form of ``qtype``: float32, float16, bf16 bits or quantized bytes
    (weighted by ``importance`` [n], one value per column, where given)."""
    if qtype == QT.F32:
        return np.ascontiguousarray(x, dtype=np.float32)
    if qtype == QT.F16:
        return x.astype(np.float16)
    if qtype == QT.BF16:
        return to_bf16_bits(x)
    if is_quantized(qtype):
        if x.shape[-1] % block_elems(qtype):
            raise ValueError(f"row length {x.shape[-1]} is not a multiple of the "
                             f"{QT(qtype).name} block size {block_elems(qtype)}")
        return quantize_rows(x, qtype, importance)
    raise ValueError(f"cannot write tensors of type {QT(qtype).name}")
