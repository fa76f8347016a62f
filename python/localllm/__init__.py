"""localllm — a local LLM runtime for GGUF models (CPU first, paged KV cache)."""
from __future__ import annotations

from . import _core
from .hub import DEFAULT_MODEL, KNOWN_MODELS, ModelNotFoundError, pull

__version__ = "0.1.0"
__all__ = ["DEFAULT_MODEL", "KNOWN_MODELS", "ModelNotFoundError", "pull", "__version__"]
