"""localllm — a local LLM runtime for GGUF models (CPU first, paged KV cache).

    >>> from localllm import LLM
    >>> llm = LLM("smollm2-135m-q4_1")
    >>> llm.generate("The capital of France is", max_tokens=8, temperature=0).text
"""
from __future__ import annotations

import os as _os
import sys as _sys

# localllm runs its own thread pool; numpy's OpenBLAS threads (numpy is only used here for light
# array handling) would spin on the same cores at startup and after every BLAS call: measured,
# they made a model load 3x slower on 2 cores. Only where the user has not chosen, and only
# before numpy is first imported (afterwards the variable has no effect).
if "numpy" not in _sys.modules:
    _os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from . import _core_variant  # noqa: E402, F401  (a portable build: puts the variant this CPU runs best first)
from . import _core  # noqa: E402, F401  (loads the native core first)
from .text.chat import ChatTemplateError, render_chat
from .gguf import GGUFError, GGUFFile, model_summary
from .hub import DEFAULT_MODEL, KNOWN_MODELS, ModelNotFoundError, pull
from .llm import LLM, GenerationResult, TextStream, Timings
from .sampling import SamplingParams
from .engine.speculative import SpecConfig
from .text.tokenizer import StreamDecoder, Tokenizer

__version__ = "0.1.0"
__all__ = [
    "LLM", "GenerationResult", "TextStream", "Timings", "SamplingParams", "SpecConfig",
    "Tokenizer", "StreamDecoder", "ChatTemplateError", "render_chat",
    "GGUFError", "GGUFFile", "model_summary",
    "DEFAULT_MODEL", "KNOWN_MODELS", "ModelNotFoundError", "pull", "__version__",
]
