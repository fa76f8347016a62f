"""GPTQ / AWQ linear layers of a checkpoint, unpacked to integer codes, zeros and scales.

Each quantized linear layer ``P`` is stored as ``P.qweight``, ``P.qzeros``, ``P.scales`` (and,
for GPTQ, ``P.g_idx``); :func:`packed_tensors` replaces them with one :class:`PackedWeightRef`
named ``P.weight`` whose ``read()`` is the real-valued weight [out, in]:

    w[o, i] = scales[g(i), o] * (q[o, i] - zeros[g(i), o])

where ``g(i)`` is ``g_idx[i]`` (GPTQ; ``i // group_size`` when absent, and for AWQ).

Layouts (int32 words, value k of a word at bits [k*bits, (k+1)*bits)):

* GPTQ ``qweight`` [in / pack, out]: packed along the input dimension, word r of column o holds
  inputs r*pack .. r*pack + pack-1 in order. ``qzeros`` [groups, out / pack] packed along the
  output dimension in order. v1 checkpoints ("gptq") store zero - 1 (AutoGPTQ adds 1 back, modulo
  2**bits); v2 ("gptq_v2") store the zero.
* AWQ GEMM ``qweight`` [in, out / 8]: packed along the output dimension in AWQ's interleaved
  order: value k of word c is output column 8c + [0, 2, 4, 6, 1, 3, 5, 7][k]; ``qzeros``
  [groups, out / 8] packed the same way.

``scales`` is [groups, out] (F16, BF16 or F32).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .arrays import to_float32
from .checkpoint import TensorRef
from .packed_config import PackedFormat, QuantizationConfigError

__all__ = ["PackedWeightRef", "Unpacked", "packed_tensors", "PACKED_SUFFIXES"]

PACKED_SUFFIXES = (".qweight", ".qzeros", ".scales", ".g_idx")
_AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])      # output column of each nibble, within a word
_AWQ_UNORDER = np.argsort(_AWQ_ORDER)               # nibble of each output column: [0,4,1,5,2,6,3,7]


@dataclass
class Unpacked:
    """One quantized linear layer as integers: w = scales[g_idx].T * (codes - zeros[g_idx].T)."""
    codes: np.ndarray     # uint8 [out, in] (uint8 holds 8-bit codes too)
    zeros: np.ndarray     # int16 [groups, out]
    scales: np.ndarray    # float32 [groups, out]
    g_idx: np.ndarray     # int64 [in]: the group of every input column

    def dequantize(self) -> np.ndarray:
        """The real-valued weight, float32 [out, in]. Exact: scale has 11 (fp16) or 8 (bf16)
        significant bits and |q - z| < 256, so every product fits float32's 24 bits (F32 scales
        are as exact as the checkpoint's own float32 arithmetic)."""
        w = self.codes.astype(np.float32)          # in place from here: one [out, in] temporary
        w -= self.zeros[self.g_idx].T
        w *= self.scales[self.g_idx].T
        return w


def _unpack_words(words: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """int32 words -> their 32/bits values each, in order, along ``axis`` (0 or 1)."""
    u = words.view(np.uint32)
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    mask = np.uint32((1 << bits) - 1)
    if axis == 0:     # [r, c] -> [r, k, c] -> [r*pack, c]
        values = (u[:, None, :] >> shifts[None, :, None]) & mask
        return values.reshape(-1, u.shape[1]).astype(np.uint8)
    values = (u[:, :, None] >> shifts[None, None, :]) & mask   # [r, c, k] -> [r, c*pack]
    return values.reshape(u.shape[0], -1).astype(np.uint8)


def _awq_columns(values: np.ndarray) -> np.ndarray:
    """AWQ's interleaved nibbles [r, out] (word-major) -> output columns in order."""
    r, n = values.shape
    return values.reshape(r, n // 8, 8)[:, :, _AWQ_UNORDER].reshape(r, n)


@dataclass(frozen=True)
class PackedWeightRef:
    """A quantized linear layer standing in for ``P.weight`` (the TensorRef interface: name,
    dtype, shape, path, nbytes, read)."""
    name: str
    shape: tuple[int, int]          # (out, in), as the float weight
    fmt: PackedFormat
    qweight: TensorRef
    qzeros: TensorRef
    scales: TensorRef
    g_idx: TensorRef | None
    dtype: str = "F32"              # what read() returns

    @property
    def path(self) -> Path:
        return self.qweight.path

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.qweight, self.qzeros, self.scales, self.g_idx) if t)

    @property
    def n_groups(self) -> int:
        return int(self.scales.shape[0])

    def read(self) -> np.ndarray:
        return self.unpack().dequantize()

    def group_of_columns(self) -> np.ndarray:
        """g(i) for every input column (reads only g_idx)."""
        n_in = self.shape[1]
        if self.g_idx is None:
            step = n_in if self.fmt.group_size == -1 else self.fmt.group_size
            return np.arange(n_in, dtype=np.int64) // step
        g = self.g_idx.read().astype(np.int64)
        if g.size and (g.min() < 0 or g.max() >= self.n_groups):
            raise QuantizationConfigError(f"{self.g_idx.name}: group indices must lie in [0, "
                                          f"{self.n_groups}) (scales has {self.n_groups} groups), "
                                          f"found {g.min()}..{g.max()}")
        return g

    def zeros_and_scales(self) -> tuple[np.ndarray, np.ndarray]:
        """(zeros int16 [groups, out], scales float32 [groups, out]); reads no qweight."""
        bits = self.fmt.bits
        zeros = _unpack_words(self.qzeros.read(), bits, axis=1)
        if self.fmt.method == "awq":
            zeros = _awq_columns(zeros)
        zeros = zeros.astype(np.int16)
        if self.fmt.zeros_minus_one:
            zeros = (zeros + 1) & ((1 << bits) - 1)   # AutoGPTQ's v1 reading, modulo 2**bits
        return zeros, to_float32(self.scales.read(), self.scales.dtype)

    def unpack(self) -> Unpacked:
        bits = self.fmt.bits
        if self.fmt.method == "awq":
            codes = _awq_columns(_unpack_words(self.qweight.read(), bits, axis=1)).T
        else:
            codes = _unpack_words(self.qweight.read(), bits, axis=0).T
        zeros, scales = self.zeros_and_scales()
        return Unpacked(np.ascontiguousarray(codes), zeros, scales, self.group_of_columns())


def _dims(fmt: PackedFormat, parts: dict[str, TensorRef], prefix: str) -> tuple[int, int, int]:
    """(out, in, groups) of one layer, every part's shape checked against the others."""
    def bad(part: str, want: list[int]) -> QuantizationConfigError:
        return QuantizationConfigError(
            f"shape mismatch: {prefix}{part} is {list(parts[part].shape)}, expected {want} for "
            f"{fmt.describe()} ({prefix}.qweight is {list(parts['.qweight'].shape)})")
    for part in (".qweight", ".qzeros", ".scales"):
        if len(parts[part].shape) != 2:
            raise bad(part, ["2 dimensions"])
    qw = parts[".qweight"].shape
    n_in, n_out = (qw[0], qw[1] * fmt.pack) if fmt.method == "awq" else (qw[0] * fmt.pack, qw[1])
    groups = 1 if fmt.group_size == -1 else -(-n_in // fmt.group_size)
    if tuple(parts[".scales"].shape) != (groups, n_out):
        raise bad(".scales", [groups, n_out])
    if tuple(parts[".qzeros"].shape) != (groups, n_out // fmt.pack) or n_out % fmt.pack:
        raise bad(".qzeros", [groups, n_out // fmt.pack])
    if ".g_idx" in parts and tuple(parts[".g_idx"].shape) != (n_in,):
        raise bad(".g_idx", [n_in])
    return n_out, n_in, groups


def _layer(fmt: PackedFormat, prefix: str, parts: dict[str, TensorRef]) -> PackedWeightRef:
    needed = [".qweight", ".qzeros", ".scales"] + (
        [".g_idx"] if fmt.method == "gptq" and fmt.desc_act else [])
    missing = [prefix + p for p in needed if p not in parts]
    if missing:
        raise QuantizationConfigError(f"quantized layer {prefix} lacks {', '.join(missing)} "
                                      f"({fmt.describe()})")
    for part in (".qweight", ".qzeros", ".g_idx"):
        if part in parts and parts[part].dtype != "I32":
            raise QuantizationConfigError(f"{prefix}{part} has dtype {parts[part].dtype}; "
                                          f"packed {fmt.method.upper()} tensors are I32")
    if parts[".scales"].dtype not in ("F16", "BF16", "F32"):
        raise QuantizationConfigError(f"{prefix}.scales has dtype {parts['.scales'].dtype}; "
                                      "expected F16, BF16 or F32")
    if fmt.method == "awq" and ".g_idx" in parts:
        raise QuantizationConfigError(f"{prefix}.g_idx: AWQ checkpoints have no g_idx")
    n_out, n_in, _ = _dims(fmt, parts, prefix)
    return PackedWeightRef(prefix + ".weight", (n_out, n_in), fmt, parts[".qweight"],
                           parts[".qzeros"], parts[".scales"], parts.get(".g_idx"))


def packed_tensors(tensors: dict[str, TensorRef], fmt: PackedFormat | None) -> dict:
    """``tensors`` with every quantized layer's parts replaced by one PackedWeightRef."""
    layers: dict[str, dict[str, TensorRef]] = {}
    for name in tensors:
        if name.endswith(".qweight"):
            layers[name[:-len(".qweight")]] = {}
    if layers and fmt is None:
        first = min(layers)
        raise QuantizationConfigError(f"{first}.qweight is a packed (GPTQ/AWQ) tensor but "
                                      "config.json has no quantization_config")
    out: dict = {}
    for name, ref in tensors.items():
        suffix = next((s for s in PACKED_SUFFIXES if name.endswith(s)), None)
        prefix = name[:-len(suffix)] if suffix else None
        if prefix is not None and prefix in layers:
            layers[prefix][suffix] = ref
        elif suffix in (".qweight", ".qzeros", ".g_idx"):
            raise QuantizationConfigError(f"{name} belongs to no quantized layer ({prefix}.qweight "
                                          "is missing)")
        else:
            out[name] = ref
    for prefix, parts in layers.items():
        if prefix + ".weight" in out:
            raise QuantizationConfigError(f"{prefix} has both a float weight and packed tensors")
        out[prefix + ".weight"] = _layer(fmt, prefix, parts)
    return out
