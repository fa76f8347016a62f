"""localllm — a local LLM runtime for GGUF models (CPU first, paged KV cache).

    >>> from localllm import LLM
    >>> llm = LLM("smollm2-135m-q4_1")
    >>> llm.generate("The capital of France is", max_tokens=8, temperature=0).text
"""
from __future__ import annotations

from . import _core
from .chat import ChatTemplateError, render_chat
from .gguf import GGUFError, GGUFFile, model_summary
from .hub import DEFAULT_MODEL, KNOWN_MODELS, ModelNotFoundError, pull
from .llm import LLM, GenerationResult, TextStream, Timings
from .sampling import SamplingParams
from .tokenizer import StreamDecoder, Tokenizer

__version__ = "0.1.0"
__all__ = [
    "LLM", "GenerationResult", "TextStream", "Timings", "SamplingParams",
    "Tokenizer", "StreamDecoder", "ChatTemplateError", "render_chat",
    "GGUFError", "GGUFFile", "model_summary",
    "DEFAULT_MODEL", "KNOWN_MODELS", "ModelNotFoundError", "pull", "__version__",
]
