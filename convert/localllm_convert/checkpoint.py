"""A Hugging Face checkpoint directory: config.json and safetensors weights, read tensor by tensor.

Weights are ``model.safetensors`` or shards listed by ``model.safetensors.index.json``. Files are
opened with the ``safetensors`` library (which validates them and lists names, dtypes and
shapes); each tensor's bytes are then read on their own from the offsets in the file header, so
only one tensor is in memory at a time (numpy has no bfloat16, hence the raw read).
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CheckpointError", "TensorRef", "Checkpoint", "SUPPORTED_DTYPES"]

# safetensors dtype -> numpy dtype of the stored values (BF16 is read as its uint16 bits)
SUPPORTED_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
}
# int32 words of GPTQ/AWQ layers (qweight, qzeros, g_idx), accepted only under those names
_PACKED_DTYPES: dict[str, np.dtype] = {"I32": np.dtype("<i4")}
_PACKED_NAMES = (".qweight", ".qzeros", ".g_idx")


class CheckpointError(ValueError):
    """The checkpoint directory is missing something or is inconsistent."""


@dataclass(frozen=True)
class TensorRef:
    """Where one checkpoint tensor lives."""
    name: str
    dtype: str                 # safetensors dtype name: F32 / F16 / BF16 (I32: packed GPTQ/AWQ)
    shape: tuple[int, ...]     # numpy order
    path: Path
    offset: int                # absolute byte offset in the file
    nbytes: int

    def read(self) -> np.ndarray:
        """The stored values (uint16 bit patterns for BF16), shaped, in memory."""
        np_dtype = SUPPORTED_DTYPES.get(self.dtype) or _PACKED_DTYPES[self.dtype]
        count = self.nbytes // np_dtype.itemsize
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = np.fromfile(f, dtype=np_dtype, count=count)
        if data.size != count:
            raise CheckpointError(f"{self.path.name}: tensor {self.name!r} is truncated "
                                  f"(file ends early)")
        return data.reshape(self.shape)


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path.name} is not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path.name} is not UTF-8 text: {e}") from None
    except RecursionError:
        raise CheckpointError(f"{path.name} nests too deeply to parse") from None


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and where its data starts."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise CheckpointError(f"{path.name} is not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", head)
        if n > 100 * 1024 * 1024:
            raise CheckpointError(f"{path.name} is not a safetensors file (header size {n})")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise CheckpointError(f"{path.name} is not a safetensors file (bad header)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name} is not a safetensors file (header is not a JSON object)")
    return header, 8 + n


_INDEX_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def _index_file(path: Path) -> dict[str, TensorRef]:
    """Every tensor of one safetensors file, checked with the safetensors library."""
    from safetensors import safe_open
    try:
        with safe_open(str(path), framework="numpy") as f:
            listed = {name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape()))
                      for name in f.keys()}
    except Exception as e:  # safetensors raises its own SafetensorError
        raise CheckpointError(f"cannot read {path.name}: {e}") from None
    header, data_start = _header(path)
    size = path.stat().st_size
    refs = {}
    for name, (dtype, shape) in listed.items():
        if dtype in ("I64", "I32") and name.endswith(_INDEX_BUFFERS):
            continue   # index buffers older transformers saved beside the weights (BERT's position_ids)
        np_dtype = SUPPORTED_DTYPES.get(dtype)
        if np_dtype is None and name.endswith(_PACKED_NAMES):
            np_dtype = _PACKED_DTYPES.get(dtype)
        if np_dtype is None:
            raise CheckpointError(f"{path.name}: tensor {name!r} has dtype {dtype}; "
                                  f"supported: {', '.join(SUPPORTED_DTYPES)}")
        begin, end = header[name]["data_offsets"]
        nbytes = end - begin
        if nbytes != int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize \
                or data_start + end > size:
            raise CheckpointError(f"{path.name}: tensor {name!r} has inconsistent size")
        refs[name] = TensorRef(name, dtype, shape, path, data_start + begin, nbytes)
    return refs


class Checkpoint:
    """config.json, the other JSON files and the weights of an HF model directory."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        if not self.dir.is_dir():
            raise CheckpointError(f"{self.dir} is not a directory")
        config_path = self.dir / "config.json"
        if not config_path.is_file():
            raise CheckpointError(f"{self.dir} has no config.json (not a Hugging Face checkpoint)")
        config = _read_json(config_path)
        if not isinstance(config, dict):
            raise CheckpointError(f"{config_path.name} must be a JSON object, got a JSON {type(config).__name__}")
        self.config: dict[str, Any] = config
        self._json_cache: dict[str, Any] = {}
        from .packed import packed_tensors
        from .packed_config import read_quantization_config
        # GPTQ/AWQ: the packed format, and each quantized layer's parts as one weight
        self.packed_format = read_quantization_config(config, self.json("quantize_config.json"))
        self.tensors: dict[str, TensorRef] = packed_tensors(self._index_weights(), self.packed_format)

    def json(self, filename: str) -> Any | None:
        """Another JSON file of the checkpoint (None when absent); parsed once, shared."""
        if filename not in self._json_cache:
            path = self.dir / filename
            self._json_cache[filename] = _read_json(path) if path.is_file() else None
        return self._json_cache[filename]

    def json_object(self, filename: str) -> dict[str, Any]:
        """A JSON file that must hold an object: {} when absent, CheckpointError when it holds
        something else (a list, a number), so readers can ``.get`` from it."""
        value = self.json(filename)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise CheckpointError(f"{filename} must be a JSON object, got a JSON {type(value).__name__}")
        return value

    def file(self, filename: str) -> Path | None:
        path = self.dir / filename
        return path if path.is_file() else None

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or []
        if not archs:
            raise CheckpointError("config.json has no 'architectures' entry")
        if not isinstance(archs, list) or not isinstance(archs[0], str):
            raise CheckpointError(f"config.json: 'architectures' must be a list of names, got {archs!r:.80}")
        return archs[0]

    def _index_weights(self) -> dict[str, TensorRef]:
        index_path = self.dir / "model.safetensors.index.json"
        if index_path.is_file():
            index = _read_json(index_path)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError("model.safetensors.index.json has no 'weight_map'")
            shards = sorted(set(weight_map.values()))
            missing = [s for s in shards if not (self.dir / s).is_file()]
            if missing:
                raise CheckpointError(f"missing weight shards: {', '.join(missing)}")
            refs: dict[str, TensorRef] = {}
            for shard in shards:
                refs.update(_index_file(self.dir / shard))
            absent = sorted(set(weight_map) - set(refs))
            if absent:
                raise CheckpointError(f"tensors listed in the index but not in the shards: "
                                      f"{', '.join(absent[:5])}")
            return refs
        single = self.dir / "model.safetensors"
        if single.is_file():
            return _index_file(single)
        if any(self.dir.glob("*.bin")) or any(self.dir.glob("*.pt")):
            raise CheckpointError(f"{self.dir} has PyTorch pickle weights only; save the model "
                                  "with safetensors (save_pretrained(safe_serialization=True))")
        raise CheckpointError(f"{self.dir} has no weights (model.safetensors or "
                              "model.safetensors.index.json)")
