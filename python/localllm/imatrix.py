"""Importance matrices (llama.cpp's imatrix): collect, save and load them.

``collect_imatrix`` runs a model over a calibration text as ``llama-imatrix`` does: the text
tokenized with BOS (as the model's metadata says), cut into chunks of ``n_ctx`` tokens, BOS put
first in every chunk, each chunk evaluated from an empty cache. While it runs, the CPU backend
hands every layer matrix's float input to the C++ collector (``csrc/model/activation_stats.h``),
which sums, per input column, the squares of the activations and counts the rows (per expert
for a mixture-of-experts tensor).

The file is llama.cpp's GGUF imatrix format: per weight ``W``, an F32 tensor ``W.in_sum2``
[n_mat, n_cols] of the sums and ``W.counts`` [n_mat, 1] of the row counts (n_mat = its experts,
or 1), tensors sorted by name; keys ``general.type = "imatrix"``, ``imatrix.datasets``,
``imatrix.chunk_count``, ``imatrix.chunk_size``. ``Imatrix.importance`` gives what
``llama-quantize --imatrix`` weights a matrix's columns by: sum / count.
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["Imatrix", "collect_imatrix", "save_imatrix", "load_imatrix", "describe"]

_SUM2, _COUNTS = ".in_sum2", ".counts"


@dataclass
class Imatrix:
    sums: dict[str, np.ndarray]          # weight name -> float32 [n_mat, n_cols]
    counts: dict[str, np.ndarray]        # weight name -> float32 [n_mat] (whole numbers)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0

    def importance(self, name: str) -> np.ndarray | None:
        """float32 [n_mat, n_cols]: each column's mean squared activation (sum / count, as
        llama-quantize computes it; 1 for an expert no token reached), or None when the file
        has no entry for the weight."""
        if name not in self.sums:
            return None
        sums, counts = self.sums[name], self.counts[name].astype(np.float32)
        out = np.ones_like(sums)
        seen = counts > 0
        out[seen] = sums[seen] / counts[seen, None]
        return out


def collect_imatrix(llm, text: str, n_ctx: int = 512, max_chunks: int | None = None, dataset: str = "",
                    progress: Callable[[int, int], None] | None = None) -> Imatrix:
    """The imatrix of ``llm`` over ``text`` (llama-imatrix's chunking; see the module doc).
    ``dataset``: the name recorded in ``imatrix.datasets`` (llama-imatrix records the path)."""
    if n_ctx < 16 or n_ctx > llm.n_ctx:
        raise ValueError(f"imatrix chunk size {n_ctx} must be in [16, {llm.n_ctx}] (the LLM's n_ctx)")
    if max_chunks is not None and max_chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {max_chunks}")
    tokens = llm.tokenize(text, add_special=True, parse_special=False)
    if len(tokens) < 2 * n_ctx:
        raise ValueError(f"the text has {len(tokens)} tokens; llama-imatrix's method needs at least "
                         f"2 * chunk size = {2 * n_ctx}")
    n_chunks = len(tokens) // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    model = llm._model
    model.collect_activations(True)
    try:
        for i in range(n_chunks):
            chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
            if llm.tokenizer.add_bos:
                chunk[0] = llm.tokenizer.bos_id
            llm.logits(chunk, rows=[n_ctx - 1])
            if progress is not None:
                progress(i + 1, n_chunks)
        stats = model.activation_stats()
    finally:
        model.collect_activations(False)
    sums = {name: s for name, (s, _) in stats.items()}
    counts = {name: c.astype(np.float32) for name, (_, c) in stats.items()}
    return Imatrix(sums, counts, [dataset] if dataset else [], n_chunks, n_ctx)


# ---- GGUF (version 3, little-endian): the subset an imatrix file uses ----
_T_U32, _T_STR, _T_ARR = 4, 8, 9
_F32 = 0
_ALIGN = 32


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def save_imatrix(path: str | os.PathLike, im: Imatrix) -> None:
    """Writes ``im`` in llama.cpp's GGUF imatrix format (what llama-imatrix writes)."""
    kvs = [_str("general.type") + struct.pack("<I", _T_STR) + _str("imatrix"),
           _str("imatrix.datasets") + struct.pack("<IIQ", _T_ARR, _T_STR, len(im.datasets))
           + b"".join(_str(d) for d in im.datasets),
           _str("imatrix.chunk_count") + struct.pack("<II", _T_U32, im.chunk_count),
           _str("imatrix.chunk_size") + struct.pack("<II", _T_U32, im.chunk_size)]
    tensors: list[tuple[str, np.ndarray]] = []
    for name in sorted(im.sums):
        sums = np.ascontiguousarray(im.sums[name], dtype=np.float32)
        tensors.append((name + _SUM2, sums))
        tensors.append((name + _COUNTS, np.ascontiguousarray(im.counts[name], dtype=np.float32).reshape(-1, 1)))
    infos, offset = [], 0
    for name, arr in tensors:
        ne = (arr.shape[1], arr.shape[0])                 # ggml order: row length first
        infos.append(_str(name) + struct.pack("<IQQIQ", 2, ne[0], ne[1], _F32, offset))
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(infos)
    with open(path, "wb") as f:
        f.write(head + b"\0" * (-len(head) % _ALIGN))
        for _, arr in tensors:
            f.write(arr.tobytes() + b"\0" * (-arr.nbytes % _ALIGN))


def load_imatrix(path: str | os.PathLike) -> Imatrix:
    """Reads a GGUF imatrix file (ours or llama-imatrix's). Raises ValueError naming the problem
    for a file that is not one (llama.cpp's legacy .dat format included), OSError for I/O."""
    from .gguf import GGUFFile
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"imatrix file {p} does not exist")
    with open(p, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{p} is not a GGUF imatrix file (llama.cpp's legacy .dat imatrix format is not "
                             "supported: convert it with llama-imatrix --in-file)")
    g = GGUFFile(str(p))
    missing = [k for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size") if k not in g]
    if missing:
        raise ValueError(f"{p} lacks the imatrix metadata {', '.join(missing)}")
    found: dict[str, dict[str, np.ndarray]] = {}
    for t in g.tensors:
        for suffix in (_SUM2, _COUNTS):
            if t.name.endswith(suffix):
                if t.type_name != "F32":
                    raise ValueError(f"{p}: tensor {t.name} is {t.type_name}, an imatrix holds F32")
                found.setdefault(t.name[:-len(suffix)], {})[suffix] = np.array(g.tensor_data(t.name), np.float32)
    if not found:
        raise ValueError(f"{p} holds no imatrix entries (*.in_sum2 / *.counts tensors)")
    sums, counts = {}, {}
    for name, parts in found.items():
        if len(parts) != 2:
            raise ValueError(f"{p}: {name} has {'sums' if _SUM2 in parts else 'counts'} but not "
                             f"{'counts' if _SUM2 in parts else 'sums'}")
        c = np.rint(parts[_COUNTS].reshape(-1)).astype(np.float32)   # llama.cpp rounds them to integers
        s = parts[_SUM2].reshape(len(c), -1) if parts[_SUM2].size % max(len(c), 1) == 0 else None
        if s is None or len(c) == 0:
            raise ValueError(f"{p}: {name} has {parts[_SUM2].size} sums for {len(c)} counts")
        sums[name], counts[name] = s, c
    datasets = list(g.get("imatrix.datasets") or [])
    return Imatrix(sums, counts, datasets, int(g.get("imatrix.chunk_count")), int(g.get("imatrix.chunk_size")))


def describe(im: Imatrix) -> str:
    """One line: entries, chunks and their size, datasets."""
    tokens = max((float(c.max()) for c in im.counts.values()), default=0.0)
    return (f"{len(im.sums)} entries, {im.chunk_count} chunks of {im.chunk_size} tokens "
            f"({math.floor(tokens)} tokens), datasets {im.datasets}")
