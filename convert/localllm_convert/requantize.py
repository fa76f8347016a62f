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
from .filetypes import FLOAT_TYPES, QT, QUANTIZATION_VERSION, is_quantized, preset
from .quant_rules import choose_types
from .writer import OutputTensor, write_gguf

__all__ = ["quantize_gguf"]

_SKIPPED_KEYS = ("general.architecture", "general.alignment", "split.no", "split.count",
                 "split.tensors.count")


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


def _copy_metadata(reader, writer, file_type: int) -> None:
    """Every key/value of the input, in order, with general.file_type/quantization_version
    replaced (or appended)."""
    import gguf
    done = set()
    for name, fld in reader.fields.items():
        if name.startswith("GGUF.") or name in _SKIPPED_KEYS:
            continue
        if name == "general.file_type":
            writer.add_file_type(file_type)
        elif name == "general.quantization_version":
            writer.add_quantization_version(QUANTIZATION_VERSION)
        else:
            vtype = fld.types[0]
            sub = None
            if vtype == gguf.GGUFValueType.ARRAY:
                if len(fld.types) > 2 or not fld.types[1:]:
                    if not fld.data:        # an empty array: element type unknown, skip it
                        continue
                    raise ValueError(f"metadata key {name!r}: nested arrays are not supported")
                sub = fld.types[1]
            writer.add_key_value(name, fld.contents(), vtype, sub)
        done.add(name)
    if "general.file_type" not in done:
        writer.add_file_type(file_type)
    if "general.quantization_version" not in done:
        writer.add_quantization_version(QUANTIZATION_VERSION)


def quantize_gguf(in_path: str | os.PathLike, out_path: str | os.PathLike, type: str,
                  allow_requantize: bool = False, threads: int | None = None,
                  progress: bool | None = None) -> ConvertResult:
    """Re-quantize ``in_path`` to preset ``type``, writing ``out_path``.

    Raises ValueError for an unknown preset, a malformed input, or a quantized input without
    ``allow_requantize``; OSError for I/O problems.
    """
    import gguf
    t0 = time.perf_counter()
    chosen = preset(type)
    src = Path(in_path)
    if not src.is_file():
        raise FileNotFoundError(f"input {src} does not exist")
    if Path(out_path).resolve() == src.resolve():
        raise ValueError("the output must be a different file than the input")
    try:
        reader = gguf.GGUFReader(src)
    except (ValueError, IndexError, KeyError) as e:
        raise ValueError(f"{src} is not a valid GGUF file: {e}") from None
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        raise ValueError(f"{src} has no general.architecture")
    arch = arch_field.contents()
    n_layer_field = reader.fields.get(f"{arch}.block_count")
    n_layer = int(n_layer_field.contents()) if n_layer_field is not None else 0

    quantized = sorted({QT(t.tensor_type).name for t in reader.tensors
                        if QT(t.tensor_type) not in FLOAT_TYPES})
    if quantized and not allow_requantize:
        raise ValueError(f"{src.name} is already quantized ({', '.join(quantized)} tensors); "
                         "requantizing loses quality — pass --allow-requantize to do it anyway")
    infos = [(t.name, tuple(int(d) for d in reversed(t.shape)), QT(t.tensor_type))
             for t in reader.tensors]
    choices = choose_types(infos, chosen, n_layer)
    outputs = []
    for t, (name, shape, current), choice in zip(reader.tensors, infos, choices):
        raw = np.asarray(t.data)
        if choice.qtype == current:
            outputs.append(OutputTensor(name, shape, current, lambda r=raw: r, int(t.n_bytes),
                                        raw=True))
        else:
            if not is_quantized(choice.qtype) and choice.qtype not in FLOAT_TYPES:
                raise ValueError(f"cannot convert tensor {name} to {choice.qtype.name}")
            outputs.append(OutputTensor(
                name, shape, choice.qtype,
                lambda r=raw, q=current, s=shape: _dequantize(r.view(np.uint8), q, s),
                int(t.n_bytes)))
    result = ConvertResult(None, arch, chosen.name,
                           [PlanEntry(o.name, o.shape, o.qtype, o.nbytes, c.fallback_from)
                            for o, c in zip(outputs, choices)],
                           input_bytes=sum(o.source_nbytes for o in outputs))
    result.output_bytes = write_gguf(out_path, arch,
                                     lambda w: _copy_metadata(reader, w, chosen.ftype),
                                     outputs, threads=threads, progress=progress)
    result.path = Path(out_path)
    result.seconds = time.perf_counter() - t0
    return result
