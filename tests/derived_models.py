"""Models made from the three cached ones for speculative decoding (a draft and a target with
one vocabulary): re-quantized with this project's converter into ~/.cache/localllm/derived, once,
never committed."""
from __future__ import annotations

import os
from pathlib import Path

from conftest import model_file

DERIVED = Path(os.path.expanduser("~/.cache/localllm/derived"))


def derived_model(key: str, preset: str) -> Path:
    """The known model `key` re-quantized to `preset` (e.g. "q4_0", "q8_0", "f16")."""
    from localllm_convert.requantize import quantize_gguf
    src = model_file(key)
    out = DERIVED / f"{src.stem}.{preset}.gguf"
    if not out.exists():
        DERIVED.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        quantize_gguf(src, tmp, preset, allow_requantize=True, progress=False)
        os.replace(tmp, out)
    return out
