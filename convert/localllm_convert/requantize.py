"""``quantize_gguf``: re-quantize a GGUF file (F32/F16/BF16 weights) to a preset.

Metadata is copied with its value types (general.file_type and general.quantization_version are
updated); tensor types are chosen with llama.cpp's rules; tensors whose type does not change are
copied byte for byte. Like llama-quantize, an input that is already quantized is refused unless
``allow_requantize`` (its tensors are then dequantized first, which compounds the error).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from .arrays import from_bf16_bits
from .convert import ConvertResult, PlanEntry
from .filetypes import FLOAT_TYPES, QT, QUANTIZATION_VERSION, preset
from .quant_rules import check_importance, choose_types
from .weighting import add_imatrix_keys, imatrix_metadata, load_imatrix, tensor_importances
from .writer import OutputTensor, write_gguf

__all__ = ["quantize_gguf"]

_SKIPPED_KEYS = ("general.architecture", "general.alignment", "split.no", "split.count",
                 "split.tensors.count")


def _heads(value) -> int:
    """A head count as llama.cpp's n_gqa() reads it: layer 0's where the key holds one per layer."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return int(value[0]) if len(value) else 0
    return int(value)


def _dequantize(raw: np.ndarray, qtype: QT, shape: tuple[int, ...]) -> np.ndarray:
    if qtype == QT.F32:
        return raw.view(np.float32).reshape(shape)
    if qtype == QT.F16:
        return raw.view(np.float16).astype(np.float32).reshape(shape)
    if qtype == QT.BF16:
        return from_bf16_bits(raw.view(np.uint16)).reshape(shape)
    try:
        from localllm import quants
        return quants.dequantize(raw, int(qtype), shape)
    except ImportError:
        import gguf.quants
        return gguf.quants.dequantize(raw.reshape(-1), qtype).reshape(shape)


def _value_type(name: str):
    """'UINT32' / 'ARRAY[STRING]' (the native reader's names) -> (type, element type)."""
    import gguf
    if name.startswith("ARRAY[") and name.endswith("]"):
        inner = name[6:-1]
        if inner.startswith("ARRAY"):
            raise ValueError("nested metadata arrays are not supported")
        return gguf.GGUFValueType.ARRAY, gguf.GGUFValueType[inner]
    return gguf.GGUFValueType[name], None


def _copy_metadata(src, writer, file_type: int) -> None:
    """Every key/value of the input, in order and with its value type, with
    general.file_type/quantization_version replaced (or appended)."""
    done = set()
    for name in src.keys():
        if name in _SKIPPED_KEYS:
            continue
        if name == "general.file_type":
            writer.add_file_type(file_type)
        elif name == "general.quantization_version":
            writer.add_quantization_version(QUANTIZATION_VERSION)
        else:
            vtype, sub = _value_type(src.value_type(name))
            value = src.get(name)
            if hasattr(value, "tolist"):
                value = value.tolist()
            if sub is not None and len(value) == 0:
                continue                    # gguf-py cannot write an empty array
            writer.add_key_value(name, value, vtype, sub)
        done.add(name)
    if "general.file_type" not in done:
        writer.add_file_type(file_type)
    if "general.quantization_version" not in done:
        writer.add_quantization_version(QUANTIZATION_VERSION)


def quantize_gguf(in_path: str | os.PathLike, out_path: str | os.PathLike, type: str,
                  allow_requantize: bool = False, threads: int | None = None,
                  progress: bool | None = None, imatrix: str | os.PathLike | None = None) -> ConvertResult:
    """Re-quantize ``in_path`` to preset ``type``, writing ``out_path``; with ``imatrix`` (a GGUF
    imatrix file) the weights are quantized importance-weighted, as llama-quantize --imatrix.

    Raises ValueError for an unknown preset, a malformed input, or a quantized input without
    ``allow_requantize``; OSError for I/O problems.
    """
    from localllm.gguf import GGUFFile
    t0 = time.perf_counter()
    chosen = preset(type)
    src_path = Path(in_path)
    if not src_path.is_file():
        raise FileNotFoundError(f"input {src_path} does not exist")
    if Path(out_path).resolve() == src_path.resolve():
        raise ValueError("the output must be a different file than the input")
    src = GGUFFile(str(src_path))          # validates the whole file (GGUFError: ValueError)
    arch = src.get("general.architecture")
    if not arch:
        raise ValueError(f"{src_path} has no general.architecture")
    n_layer = int(src.get(f"{arch}.block_count", 0))
    n_head = _heads(src.get(f"{arch}.attention.head_count", 1))
    n_head_kv = _heads(src.get(f"{arch}.attention.head_count_kv", n_head)) or 1
    n_gqa = n_head // n_head_kv
    n_expert = int(src.get(f"{arch}.expert_count", 0) or 0)

    quantized = sorted({QT(t.type).name for t in src.tensors if QT(t.type) not in FLOAT_TYPES})
    if quantized and not allow_requantize:
        raise ValueError(f"{src_path.name} is already quantized ({', '.join(quantized)} tensors); "
                         "requantizing loses quality — pass --allow-requantize to do it anyway")
    infos = [(t.name, tuple(int(d) for d in reversed(t.shape)), QT(t.type)) for t in src.tensors]
    im = load_imatrix(imatrix) if imatrix is not None else None
    choices = choose_types(infos, chosen, n_layer, n_gqa, n_expert, has_imatrix=im is not None)
    encoded = [c.qtype != current for (_, _, current), c in zip(infos, choices)]
    check_importance(choices, chosen, has_imatrix=im is not None)
    importances = [None] * len(choices) if im is None else \
        tensor_importances(choices, [shape for _, shape, _ in infos], encoded, chosen, im)
    outputs = []
    for t, (name, shape, current), choice, qw in zip(src.tensors, infos, choices, importances):
        def raw(n=name) -> np.ndarray:
            return np.ascontiguousarray(src.tensor_data(n)).view(np.uint8)
        if choice.qtype == current:
            outputs.append(OutputTensor(name, shape, current, raw, int(t.nbytes), raw=True))
        else:
            outputs.append(OutputTensor(
                name, shape, choice.qtype,
                lambda r=raw, q=current, s=shape: _dequantize(r(), q, s), int(t.nbytes), importance=qw))
    extra_keys = imatrix_metadata(imatrix, im) if im is not None else []

    def add_metadata(w) -> None:
        _copy_metadata(src, w, chosen.ftype)
        add_imatrix_keys(w, extra_keys)

    result = ConvertResult(None, arch, chosen.name,
                           [PlanEntry(o.name, o.shape, o.qtype, o.nbytes, c.fallback_from)
                            for o, c in zip(outputs, choices)],
                           input_bytes=sum(o.source_nbytes for o in outputs))
    result.output_bytes = write_gguf(out_path, arch,
                                     add_metadata,
                                     outputs, threads=threads, progress=progress)
    result.path = Path(out_path)
    result.seconds = time.perf_counter() - t0
    return result
