"""Architecture converters, one module per architecture, registered by HF class name."""
from __future__ import annotations

from . import (bert, gemma2, gemma3, llama, nomic_bert, phi3, qwen2, qwen3, qwen3moe,  # noqa: F401  (registration)
               xlm_roberta)
from .base import REGISTRY, ArchConverter, PlannedTensor, converter_for, supported_architectures

__all__ = ["REGISTRY", "ArchConverter", "PlannedTensor", "converter_for",
           "supported_architectures"]
