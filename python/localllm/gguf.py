"""GGUF files: the native validating reader and a model summary for `localllm info`.

``GGUFFile(path)`` (from the C++ core) maps a GGUF v2/v3 file read-only and validates all of it
up front; any malformed content raises :class:`GGUFError` (a ``ValueError``), a missing or
unreadable file raises ``OSError`` (``FileNotFoundError``, ...). Its API:

* ``version``, ``file_size``, ``alignment``, ``data_offset`` (absolute start of tensor data)
* ``metadata``: dict in file order. Integers -> ``int``, floats -> ``float``, ``bool``, ``str``;
  arrays of numbers/bools -> 1-D **numpy arrays** of the element dtype (e.g. token scores);
  arrays of strings -> ``list[str]``; nested arrays -> lists. Built once per object, shared.
  ``get(key, default=None)`` converts one value only; ``key in f``; ``keys()``.
* ``tensors``: list of ``GGUFTensor`` (``name``, ``type`` id, ``type_name``, ``shape`` in ggml
  order ``ne[0..n)``, ``offset`` absolute in the file, ``relative_offset``, ``nbytes``,
  ``n_elements``); ``tensor(name)``.
* ``tensor_data(name)``: read-only zero-copy numpy view, numpy order (reversed ``shape``):
  float32/float16 (and f64/int types) typed, uint8 rows of raw blocks for quantized types and
  BF16. The view keeps the mapping alive on its own.
"""
from __future__ import annotations

import os
from typing import Any

from ._core import GGUFError, GGUFFile, GGUFTensor

__all__ = ["GGUFError", "GGUFFile", "GGUFTensor", "model_summary", "FILE_TYPE_NAMES"]

# llama.cpp's `general.file_type` values (LLAMA_FTYPE_*): what most tensors were quantized to.
FILE_TYPE_NAMES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}


def _plain(value: Any) -> Any:
    """A metadata value as JSON-ready Python (numpy arrays and scalars -> lists and numbers)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def model_summary(path: str | os.PathLike, gguf: GGUFFile | None = None) -> dict[str, Any]:
    """Summary of a GGUF model for `localllm info` (JSON-serialisable).

    Architecture hyper-parameters come from the ``{arch}.*`` keys; absent ones are ``None``.
    Per-layer hyper-parameters stored as arrays (some architectures do) come back as lists.
    """
    f = gguf if gguf is not None else GGUFFile(path)
    arch = f.get("general.architecture")

    def arch_key(suffix: str) -> Any:
        return _plain(f.get(f"{arch}.{suffix}")) if arch else None

    type_histogram: dict[str, dict[str, int]] = {}
    n_params = 0
    for t in f.tensors:
        entry = type_histogram.setdefault(t.type_name, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += t.nbytes
        n_params += t.n_elements

    n_embd, n_head = arch_key("embedding_length"), arch_key("attention.head_count")
    head_dim = arch_key("attention.key_length")
    if head_dim is None and isinstance(n_embd, int) and isinstance(n_head, int) and n_head > 0:
        head_dim = n_embd // n_head
    tokens = f.get("tokenizer.ggml.tokens")
    vocab_size = len(tokens) if tokens is not None else arch_key("vocab_size")
    file_type = f.get("general.file_type")

    return {
        "path": str(path),
        "file_size": f.file_size,
        "gguf_version": f.version,
        "alignment": f.alignment,
        "data_offset": f.data_offset,
        "n_metadata": len(f.keys()),
        "n_tensors": len(f.tensors),
        "architecture": arch,
        "name": f.get("general.name"),
        "n_params": n_params,
        "tensor_types": dict(sorted(type_histogram.items(), key=lambda kv: -kv[1]["bytes"])),
        "file_type": file_type,
        "file_type_name": FILE_TYPE_NAMES.get(file_type) if isinstance(file_type, int) else None,
        "context_length": arch_key("context_length"),
        "n_layers": arch_key("block_count"),
        "n_embd": n_embd,
        "n_ff": arch_key("feed_forward_length"),
        "n_head": n_head,
        "n_head_kv": arch_key("attention.head_count_kv"),
        "head_dim": head_dim,
        "rope_freq_base": arch_key("rope.freq_base"),
        "vocab_size": vocab_size,
        "tokenizer_model": f.get("tokenizer.ggml.model"),
        "tokenizer_pre": f.get("tokenizer.ggml.pre"),
        "has_chat_template": "tokenizer.chat_template" in f,
    }
