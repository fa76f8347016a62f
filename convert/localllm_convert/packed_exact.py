"""The GGUF type a GPTQ/AWQ layer loses least in, and its blocks built from the layer's own codes.

A layer is stored exactly in a ggml legacy type when every block of 32 input columns lies in one
group (so one scale and one zero cover the block) and its scale is an fp16 value (the block's
``d``). Then, with z the block's zero:

* Q4_0 (4.5 bits/weight), ``d * (c - 8)``: c = q - z + 8, which lies in [0, 15] when z = 8 —
  every symmetric 4-bit GPTQ layer.
* Q4_1 (5.0), ``d * c + m``: c = q and m = -d*z, when m is an fp16 value in every block (rare:
  d*z needs up to 15 significant bits).
* Q5_0 (5.5), ``d * (c - 16)``: c = q - z + 16, in [1, 31] for any 4-bit q and z — every
  asymmetric 4-bit GPTQ or AWQ layer.
* Q8_0 (8.5), ``d * c``: c = q - z, in [-128, 127] when z = 128 — every symmetric 8-bit layer.

The first of these that fits is used. Otherwise (act-order with g_idx not constant over blocks
of 32, scales that are not fp16, asymmetric 8-bit, rows not a multiple of 32) the layer's
dequantized weight is requantized to Q8_0, the type that adds least to it (F16 when rows are not
a multiple of 32).

The exact blocks are built directly from the codes (no quantizer search), and dequantized again
after building: a block that does not reproduce the layer's weight is an error, never a silent
loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .filetypes import QT, block_elems
from .packed import PackedWeightRef, Unpacked

__all__ = ["PackedChoice", "choose_packed_type", "encode_exact"]

_BLOCK = 32
_FP16 = np.float16


@dataclass(frozen=True)
class PackedChoice:
    qtype: QT
    exact: bool          # blocks built from the codes, equal to the dequantized layer
    why: str             # why not exact (empty when exact)


def _block_groups(g_idx: np.ndarray) -> np.ndarray | None:
    """The group of each block of 32 input columns, or None when a block spans two groups."""
    if g_idx.size % _BLOCK:
        return None
    blocks = g_idx.reshape(-1, _BLOCK)
    return blocks[:, 0] if bool((blocks == blocks[:, :1]).all()) else None


def _fp16_exact(x: np.ndarray) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.isfinite(x).all() and (x.astype(_FP16).astype(np.float32) == x).all())


def _requantized(ref: PackedWeightRef, why: str) -> PackedChoice:
    """The target of a layer no type holds exactly: Q8_0 (adds ~0.5% relative RMS error to the
    layer's weight; Q6_K adds ~1.6% and on SmolLM2-135M's ffn_down that alone costs 6 points of
    top-1 agreement), F16 when rows do not split into 32-blocks. ``--type`` trades it for size."""
    target = QT.Q8_0 if ref.shape[1] % block_elems(QT.Q8_0) == 0 else QT.F16
    return PackedChoice(target, False, why)


def choose_packed_type(ref: PackedWeightRef) -> PackedChoice:
    """The type for one GPTQ/AWQ layer, decided from its g_idx, zeros and scales (not qweight)."""
    blocks = _block_groups(ref.group_of_columns())
    if blocks is None:
        return _requantized(ref, "blocks of 32 columns span several groups (act-order or group "
                                 "size not a multiple of 32)")
    zeros, scales = ref.zeros_and_scales()
    if not _fp16_exact(scales):
        return _requantized(ref, "scales are not fp16 values")
    z = zeros[blocks]
    if ref.fmt.bits == 8:
        if (z == 128).all():
            return PackedChoice(QT.Q8_0, True, "")
        return _requantized(ref, "asymmetric 8-bit (no ggml type stores q - z exactly)")
    if (z == 8).all():
        return PackedChoice(QT.Q4_0, True, "")
    if _fp16_exact(-scales[blocks] * z.astype(np.float32)):
        return PackedChoice(QT.Q4_1, True, "")
    return PackedChoice(QT.Q5_0, True, "")


def _nibbles(c: np.ndarray) -> np.ndarray:
    """[..., 32] values < 16 -> [..., 16] bytes: low nibble element j, high nibble j + 16."""
    return (c[..., :16] | (c[..., 16:] << 4)).astype(np.uint8)


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype(_FP16)[..., None].view(np.uint8)


def _blocks(u: Unpacked, qtype: QT) -> np.ndarray:
    """uint8 [out, in/32, block bytes] of ``qtype`` from the codes (choose_packed_type said so)."""
    out_dim, in_dim = u.codes.shape
    groups = u.g_idx.reshape(-1, _BLOCK)[:, 0]
    d = u.scales[groups].T                                       # [out, nb]
    z = u.zeros[groups].T.astype(np.int16)[..., None]            # [out, nb, 1]
    q = u.codes.reshape(out_dim, in_dim // _BLOCK, _BLOCK).astype(np.int16)
    if qtype == QT.Q4_0:
        return np.concatenate([_f16_bytes(d), _nibbles(q - z + 8)], axis=-1)
    if qtype == QT.Q4_1:
        m = -d * z[..., 0].astype(np.float32)
        return np.concatenate([_f16_bytes(d), _f16_bytes(m), _nibbles(q)], axis=-1)
    if qtype == QT.Q5_0:
        c = q - z + 16
        high = ((c >> 4) & 1).astype(np.uint32) << np.arange(_BLOCK, dtype=np.uint32)
        qh = np.bitwise_or.reduce(high, axis=-1).astype("<u4")[..., None].view(np.uint8)
        return np.concatenate([_f16_bytes(d), qh, _nibbles(c & 0xF)], axis=-1)
    if qtype == QT.Q8_0:
        return np.concatenate([_f16_bytes(d), (q - z).astype(np.int8).view(np.uint8)], axis=-1)
    raise ValueError(f"no exact encoding into {QT(qtype).name}")


def _dequantize(raw: np.ndarray, qtype: QT, shape: tuple[int, ...]) -> np.ndarray:
    try:
        from localllm import quants
        return quants.dequantize(raw, int(qtype), shape)
    except ImportError:
        import gguf.quants
        return gguf.quants.dequantize(raw.reshape(-1), qtype).reshape(shape)


def encode_exact(ref: PackedWeightRef, qtype: QT,
                 transform: Callable[[np.ndarray], np.ndarray] | None) -> np.ndarray:
    """The layer's bytes in ``qtype`` [out, row bytes], rows transformed like the float weight
    (the architecture's row permutation), checked to dequantize to exactly the layer's weight."""
    u = ref.unpack()
    data = _blocks(u, qtype).reshape(u.codes.shape[0], -1)
    want = u.dequantize()
    if transform is not None:
        data, want = transform(data), transform(want)
    data = np.ascontiguousarray(data)
    got = _dequantize(data, qtype, want.shape)
    if not np.array_equal(got, want):
        bad = int(np.count_nonzero(got != want))
        raise RuntimeError(f"{ref.name}: {QT(qtype).name} blocks built from the codes differ from "
                           f"the dequantized weight in {bad} values (please report this checkpoint)")
    return data
