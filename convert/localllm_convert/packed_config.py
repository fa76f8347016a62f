"""The ``quantization_config`` of a GPTQ or AWQ checkpoint: what the converter can unpack.

Read from ``config.json`` (``quantization_config``, as transformers writes it) or, for older
AutoGPTQ checkpoints, from ``quantize_config.json`` (GPTQ implied). Supported:

* GPTQ (AutoGPTQ / GPTQModel / transformers layout), 4 or 8 bits, any group size (or -1: one
  group per column), symmetric or not, with or without act-order (``desc_act``; ``g_idx`` maps
  input columns to groups). ``checkpoint_format`` "gptq" (v1: zeros stored minus one, as
  AutoGPTQ wrote them) or "gptq_v2" (GPTQModel: zeros stored as they are).
* AWQ GEMM packing (``version`` "gemm"), 4 bits, with zero points.

Anything else (3-bit, EXL2, Marlin / BitBLAS / exllama repacked formats, AWQ GEMV) is refused
with an error naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checkpoint import CheckpointError

__all__ = ["PackedFormat", "QuantizationConfigError", "read_quantization_config"]

_GPTQ_FORMATS = {"gptq": 1, "gptq_v2": 2}
_GPTQ_BITS = (4, 8)
_AWQ_BITS = (4,)


class QuantizationConfigError(CheckpointError):
    """config.json's quantization_config is malformed or describes an unsupported format."""


@dataclass(frozen=True)
class PackedFormat:
    """How a checkpoint's quantized linear layers are stored."""
    method: str            # "gptq" | "awq"
    bits: int              # 4 | 8
    group_size: int        # input columns per group; -1: the whole column is one group
    sym: bool              # GPTQ: symmetric (zero = 2**(bits-1)); AWQ: always False
    desc_act: bool         # GPTQ act-order: columns quantized in a permuted order (g_idx)
    zeros_minus_one: bool  # GPTQ v1 ("gptq"): stored zero = zero - 1
    source: str            # where it was read, for messages: "config.json: quantization_config"

    @property
    def pack(self) -> int:
        """Values per int32 word."""
        return 32 // self.bits

    def describe(self) -> str:
        groups = "per-column" if self.group_size == -1 else f"group {self.group_size}"
        extra = ""
        if self.method == "gptq":
            extra = (f", {'sym' if self.sym else 'asym'}, {'act-order' if self.desc_act else 'no act-order'}, "
                     f"{'v1' if self.zeros_minus_one else 'v2'} zeros")
        return f"{self.method.upper()} {self.bits}-bit, {groups}{extra}"


def _fail(source: str, key: str, value: Any, why: str) -> QuantizationConfigError:
    return QuantizationConfigError(f"{source}.{key} = {value!r:.60}: {why}")


def _int_field(qc: dict[str, Any], source: str, key: str, allowed: tuple[int, ...] | None = None,
               default: Any = None) -> int:
    value = qc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(source, key, value, "must be an integer")
    if allowed is not None and value not in allowed:
        raise _fail(source, key, value, f"is not supported (supported: {', '.join(map(str, allowed))})")
    return value


def _bool_field(qc: dict[str, Any], source: str, key: str, default: bool) -> bool:
    value = qc.get(key, default)
    if not isinstance(value, bool):
        raise _fail(source, key, value, "must be true or false")
    return value


def _group_size(qc: dict[str, Any], source: str) -> int:
    value = _int_field(qc, source, "group_size", default=-1)
    if value != -1 and value <= 0:
        raise _fail(source, "group_size", value, "must be a positive number of columns, or -1 "
                    "(one group per column)")
    return value


def _gptq(qc: dict[str, Any], source: str) -> PackedFormat:
    fmt = qc.get("checkpoint_format", qc.get("format", "gptq"))
    if qc.get("is_marlin_format") is True:
        raise _fail(source, "is_marlin_format", True, "Marlin-repacked GPTQ weights are not "
                    "supported; use the checkpoint in its GPTQ format")
    if fmt not in _GPTQ_FORMATS:
        raise _fail(source, "checkpoint_format", fmt, f"is not supported (supported: "
                    f"{', '.join(_GPTQ_FORMATS)}; Marlin, BitBLAS and other repacked formats are not)")
    return PackedFormat("gptq", _int_field(qc, source, "bits", _GPTQ_BITS), _group_size(qc, source),
                        _bool_field(qc, source, "sym", True), _bool_field(qc, source, "desc_act", False),
                        _GPTQ_FORMATS[fmt] == 1, source)


def _awq(qc: dict[str, Any], source: str) -> PackedFormat:
    version = qc.get("version", "gemm")
    if not isinstance(version, str) or version.lower() != "gemm":
        raise _fail(source, "version", version, "is not supported (supported: gemm; GEMV, Marlin "
                    "and exllama AWQ packings are not)")
    bits = _int_field(qc, source, "bits", _AWQ_BITS, default=qc.get("w_bit", 4))
    group_size = _group_size({"group_size": qc.get("group_size", qc.get("q_group_size", 128))}, source)
    if not _bool_field(qc, source, "zero_point", True):
        raise _fail(source, "zero_point", False, "AWQ without zero points is not supported")
    return PackedFormat("awq", bits, group_size, False, False, False, source)


def read_quantization_config(config: dict[str, Any], quantize_config: Any) -> PackedFormat | None:
    """The packed format the checkpoint declares, or None for an unquantized checkpoint.

    Args:
        config: config.json.
        quantize_config: quantize_config.json (AutoGPTQ's own file; None when absent).
    """
    if "quantization_config" in config:
        qc, source = config["quantization_config"], "config.json: quantization_config"
        if not isinstance(qc, dict):
            raise QuantizationConfigError(f"{source} must be a JSON object, got {qc!r:.60}")
        method = qc.get("quant_method")
    elif quantize_config is not None:
        qc, source = quantize_config, "quantize_config.json"
        if not isinstance(qc, dict):
            raise QuantizationConfigError(f"{source} must be a JSON object, got {qc!r:.60}")
        method = qc.get("quant_method", "gptq")
    else:
        return None
    if method == "gptq":
        return _gptq(qc, source)
    if method == "awq":
        return _awq(qc, source)
    raise _fail(source, "quant_method", method, "is not supported (supported: gptq, awq)")
