"""Hugging Face checkpoint -> GGUF converter with one-step quantization, and GGUF requantization.

``convert(hf_dir, out, type="q4_k_m")`` reads config.json, the safetensors weights and the
tokenizer files and writes a GGUF file with llama.cpp's metadata keys, tensor names and layouts;
``quantize_gguf(in, out, "q4_k_m")`` re-quantizes an F32/F16/BF16 GGUF file.
"""
from __future__ import annotations

from .archs import supported_architectures
from .checkpoint import CheckpointError
from .convert import ConvertResult, PlanEntry, convert
from .filetypes import PRESETS
from .requantize import quantize_gguf
from .vocab import VocabError

__all__ = ["convert", "quantize_gguf", "ConvertResult", "PlanEntry", "PRESETS",
           "supported_architectures", "CheckpointError", "VocabError"]
