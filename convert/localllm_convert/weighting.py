"""Importance weights for the quantizers from an imatrix file (``--imatrix``), as llama-quantize
uses them: a tensor's entry (matched by name) gives each column's mean squared activation, per
expert for a 3-D tensor; a tensor without an entry is quantized unweighted; an entry of the
wrong size is an error (token_embd's is ignored, as llama-quantize does); a tensor whose type
needs an imatrix (``quant_rules.requires_imatrix``) and has no entry is an error.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .filetypes import QT, Preset, is_quantized
from .quant_rules import TensorChoice, requires_imatrix

__all__ = ["load_imatrix", "tensor_importances", "imatrix_metadata", "add_imatrix_keys"]


def load_imatrix(path: str | os.PathLike):
    """The imatrix file (localllm.imatrix.Imatrix); ValueError naming the problem when it is not one."""
    from localllm.imatrix import load_imatrix as load
    return load(path)


def tensor_importances(choices: Sequence[TensorChoice], shapes: Sequence[tuple[int, ...]],
                       quantized_here: Sequence[bool], preset: Preset, imatrix) -> list[np.ndarray | None]:
    """Per tensor: float32 [n_mat, ncols] importances to quantize it with, or None.
    shapes: numpy order (rows last); quantized_here: whether the tensor is encoded (not copied)."""
    out: list[np.ndarray | None] = []
    for c, shape, encoded in zip(choices, shapes, quantized_here):
        weights = None
        if encoded and is_quantized(c.qtype):
            weights = imatrix.importance(c.name)
            n_mat = int(shape[0]) if len(shape) == 3 else 1
            if weights is not None and weights.size != n_mat * int(shape[-1]):
                if c.name != "token_embd.weight":
                    raise ValueError(f"imatrix entry {c.name} has {weights.size} values; the tensor needs "
                                     f"{n_mat * int(shape[-1])} ({n_mat} x {shape[-1]} columns)")
                weights = None
            if weights is not None:
                weights = np.ascontiguousarray(weights.reshape(n_mat, int(shape[-1])), dtype=np.float32)
                if not np.all(np.isfinite(weights)):
                    raise ValueError(f"imatrix entry {c.name} holds non-finite values")
        if weights is None and encoded and requires_imatrix(c.name, c.qtype, preset):
            raise ValueError(f"the imatrix has no entry for {c.name}, which {preset.name} quantizes to "
                             f"{QT(c.qtype).name}: that needs one")
        out.append(weights)
    return out


def imatrix_metadata(path: str | os.PathLike, imatrix) -> list[tuple[str, object, str]]:
    """The keys llama-quantize records about the imatrix: (key, value, 'str' | 'i32')."""
    keys: list[tuple[str, object, str]] = [("quantize.imatrix.file", str(path), "str")]
    if imatrix.datasets:
        keys.append(("quantize.imatrix.dataset", imatrix.datasets[0], "str"))
    keys.append(("quantize.imatrix.entries_count", len(imatrix.sums), "i32"))
    if imatrix.chunk_count > 0:
        keys.append(("quantize.imatrix.chunks_count", imatrix.chunk_count, "i32"))
    return keys


def add_imatrix_keys(writer, keys: list[tuple[str, object, str]]) -> None:
    """weighting.imatrix_metadata's keys, with their GGUF value types."""
    for key, value, kind in keys:
        if kind == "str":
            writer.add_string(key, value)
        else:
            writer.add_int32(key, int(value))
