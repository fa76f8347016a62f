"""Structured output: constrained decoding with llguidance (JSON schemas, JSON mode, GBNF /
Lark grammars, regexes) and OpenAI-style tool calling."""
from .grammar import GrammarSpec, compile_constraint

__all__ = ["GrammarSpec", "compile_constraint"]
