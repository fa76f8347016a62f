"""Requests for constrained output (a JSON schema, JSON mode, a GBNF / Lark grammar, a regex)
compiled into llguidance grammars, with every problem reported as a ValueError naming it.

The one entry point is `compile_constraint`: `LLM.generate(json_schema=..., grammar=...,
response_format=...)`, the server's `response_format` / `json_schema` / `grammar` fields, tool
calling and the CLI all build their `GrammarSpec` here, so they accept and reject the same
things.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import llguidance

__all__ = ["GrammarSpec", "compile_constraint", "json_schema_grammar", "JSON_WHITESPACE"]

# Whitespace between JSON tokens: at most this many characters at each place JSON allows it,
# so a model cannot fill max_tokens with newlines (llama.cpp's JSON grammars bound it likewise),
# yet indented output (a newline and a few levels of indent) stays possible.
JSON_WHITESPACE = r"[\x20\x0A\x0D\x09]{0,20}"
_JSON_OPTIONS = {"whitespace_pattern": JSON_WHITESPACE}


@dataclass(frozen=True)
class GrammarSpec:
    """A validated llguidance grammar and what it came from (for messages and logs)."""
    grammar: str          # llguidance's grammar (JSON text), what LLMatcher takes
    kind: str             # "json_schema", "json_object", "gbnf", "lark", "regex", "tools"
    source: str = ""      # the schema / grammar text as given, for error messages

    def __repr__(self) -> str:
        return f"GrammarSpec(kind={self.kind!r})"


def _check(grammar: str, what: str) -> str:
    """The grammar, or a ValueError naming what llguidance rejects in it: an error, or any
    warning (an unsupported keyword or format is never dropped silently)."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error or messages:
        raise ValueError(f"{what}: " + "; ".join(m.removeprefix("WARNING: ") for m in messages))
    return grammar


def json_schema_grammar(schema: Any, what: str = "json_schema") -> str:
    """The llguidance grammar of a JSON schema (a dict or its JSON text), with bounded whitespace."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"{what}: not valid JSON: {e}") from None
    if isinstance(schema, bool):           # JSON Schema's true (anything) / false (nothing)
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, Mapping):
        raise ValueError(f"{what}: must be a JSON object (a schema), got {type(schema).__name__}")
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(dict(schema), overrides=_JSON_OPTIONS)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{what}: {e}") from None
    return _check(grammar, f"{what}: unsupported or invalid schema")


def _grammar_text(grammar: str) -> GrammarSpec:
    """A GBNF (llama.cpp) or Lark (llguidance) grammar."""
    if not isinstance(grammar, str) or not grammar.strip():
        raise ValueError("grammar: must be a non-empty string (GBNF or Lark)")
    try:
        compiled = llguidance.grammar_from("gbnf", grammar)
    except ValueError as e:
        raise ValueError(f"grammar: invalid: {e}") from None
    return GrammarSpec(_check(compiled, "grammar: invalid"), "gbnf", grammar)


def _response_format(response_format: Any) -> Optional[GrammarSpec]:
    """OpenAI's response_format: {"type": "text" | "json_object" | "json_schema", ...}."""
    if not isinstance(response_format, Mapping):
        raise ValueError(f"response_format: must be an object with a 'type', got {response_format!r}")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec(json_schema_grammar({"type": "object"}, "response_format"), "json_object")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise ValueError("response_format: type json_schema needs a 'json_schema' object with a 'schema'")
        schema = spec["schema"]
        return GrammarSpec(json_schema_grammar(schema, f"response_format: json_schema {spec.get('name', '')!r}"),
                           "json_schema", json.dumps(schema))
    raise ValueError(f"response_format: type must be 'text', 'json_object' or 'json_schema', got {kind!r}")


def compile_constraint(*, json_schema: Any = None, grammar: Optional[str] = None,
                       response_format: Any = None, regex: Optional[str] = None) -> Optional[GrammarSpec]:
    """The GrammarSpec of at most one of: a JSON schema (dict or JSON text), a GBNF / Lark
    grammar, an OpenAI response_format, a regex. None when none is given (or response_format
    is {"type": "text"}). Raises ValueError naming the problem (two given, bad syntax, an
    unsupported schema feature)."""
    given = [name for name, value in (("json_schema", json_schema), ("grammar", grammar),
                                      ("response_format", response_format), ("regex", regex))
             if value is not None]
    if len(given) > 1:
        raise ValueError(f"give at most one of json_schema, grammar, response_format and regex, got "
                         f"{', '.join(given)}")
    if json_schema is not None:
        return GrammarSpec(json_schema_grammar(json_schema), "json_schema",
                           json_schema if isinstance(json_schema, str) else json.dumps(json_schema))
    if grammar is not None:
        return _grammar_text(grammar)
    if response_format is not None:
        return _response_format(response_format)
    if regex is not None:
        if not isinstance(regex, str):
            raise ValueError(f"regex: must be a string, got {type(regex).__name__}")
        return GrammarSpec(_check(llguidance.LLMatcher.grammar_from_regex(regex), "regex: invalid"),
                           "regex", regex)
    return None
