"""OpenAI tool calling: which call syntax a model's chat template teaches (its family), the
grammar that enforces a call (`tool_choice` "required" or a named function, and in "auto" mode
once a call has started), and parsing calls out of the output, whole or streamed.

Families, chosen from the template text:
- hermes (Hermes, Qwen2.5): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
- mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``
- llama3: a JSON object ``{"name": ..., "parameters": {...}}``
- generic (templates without tool support): ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``,
  taught by a system message the request adds.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import llguidance

from .grammar import GrammarSpec, json_schema_grammar, JSON_WHITESPACE

__all__ = ["ToolCall", "ToolSetup", "tool_family", "parse_tool_calls", "ToolCallStream", "calls_finish_reason"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_JSON_OPTIONS = {"whitespace_pattern": JSON_WHITESPACE}


@dataclass
class ToolCall:
    name: str
    arguments: str                       # JSON text, as OpenAI sends it
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def tool_family(template: Optional[str]) -> str:
    """The tool-call syntax a chat template teaches (see the module docstring)."""
    t = template or ""
    if "<tool_call>" in t:
        return "hermes"
    if "[TOOL_CALLS]" in t:
        return "mistral"
    if "<|python_tag|>" in t or ("ipython" in t and "tools" in t):
        return "llama3"
    return "generic"


def _check_tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list) or not tools:
        raise ValueError("tools: must be a non-empty list of {'type': 'function', 'function': {...}}")
    names = set()
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ValueError(f"tools: tools[{i}] must be {{'type': 'function', 'function': {{'name', ...}}}}")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"tools: tools[{i}].function.name must match [A-Za-z0-9_.-]{{1,64}}, got {name!r}")
        if name in names:
            raise ValueError(f"tools: the function name {name!r} appears twice")
        names.add(name)
        json_schema_grammar(fn.get("parameters", {"type": "object"}), f"tools: tools[{i}].function.parameters")
    return tools


class ToolSetup:
    """A request's tools, tool_choice and parallel_tool_calls for one chat template."""

    def __init__(self, tools: Any, tool_choice: Any = "auto", parallel: bool = True,
                 template: Optional[str] = None, special_texts: frozenset = frozenset()):
        self.tools = _check_tools(tools)
        self.family = tool_family(template)
        self.parallel = bool(parallel)
        self._special = special_texts       # texts of the vocabulary's special tokens
        names = [t["function"]["name"] for t in self.tools]
        if tool_choice is None:
            tool_choice = "auto"
        if isinstance(tool_choice, dict):
            name = (tool_choice.get("function") or {}).get("name")
            if name not in names:
                raise ValueError(f"tool_choice: names the function {name!r}, which is not in tools ({names})")
            self.choice, self.forced = "named", name
        elif tool_choice in ("auto", "none", "required"):
            self.choice, self.forced = tool_choice, None
        else:
            raise ValueError(f"tool_choice: must be 'auto', 'none', 'required' or "
                             f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")

    @property
    def parses(self) -> bool:
        return self.choice != "none"

    def template_tools(self) -> Optional[list[dict]]:
        """The tools the chat template sees (none for tool_choice "none")."""
        return None if self.choice == "none" else self.tools

    def messages(self, messages: list[dict]) -> list[dict]:
        """The conversation for the template: tool-call arguments as objects (templates write
        them with tojson), and for templates without tool support a system message that lists
        the tools and the call syntax."""
        out = []
        for m in messages:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [_call_for_template(c) for c in m["tool_calls"]]
            out.append(m)
        if self.family == "generic" and self.choice != "none":
            listing = "\n".join(json.dumps(t["function"]) for t in self.tools)
            out.insert(0, {"role": "system", "content":
                           "You can call these functions:\n" + listing + "\nTo call functions, answer only "
                           'with JSON: {"tool_calls": [{"name": <name>, "arguments": <object>}]}'})
        return out

    # ---- the grammar ----
    def _call_schema(self, argument_key: str) -> dict:
        tools = [t for t in self.tools if self.forced is None or t["function"]["name"] == self.forced]
        options = [{"type": "object", "properties": {
                    "name": {"const": t["function"]["name"]},
                    argument_key: t["function"].get("parameters") or {"type": "object"}},
                    "required": ["name", argument_key], "additionalProperties": False} for t in tools]
        return options[0] if len(options) == 1 else {"anyOf": options}

    def _literal(self, text: str) -> str:
        """A Lark item for marker text: the special token when the vocabulary has one."""
        return text if text in self._special else json.dumps(text)

    def constraint(self) -> Optional[GrammarSpec]:
        """The grammar of this request's output (None: unconstrained)."""
        if self.choice == "none":
            return None
        fam, many = self.family, self.parallel
        if fam == "hermes":
            call = (f'{self._literal("<tool_call>")} "\\n" %json {json.dumps(self._call_schema("arguments"))} '
                    f'"\\n" {self._literal("</tool_call>")}')
            calls = 'call ("\\n" call)* "\\n"?' if many else 'call "\\n"?'
            marker_special = "<tool_call>" in self._special
        elif fam == "mistral":
            array = {"type": "array", "items": self._call_schema("arguments"), "minItems": 1}
            if not many:
                array["maxItems"] = 1
            call = f'{self._literal("[TOOL_CALLS]")} %json {json.dumps(array)}'
            calls, marker_special = "call", "[TOOL_CALLS]" in self._special
        else:
            key = "parameters" if fam == "llama3" else "arguments"
            if fam == "llama3":
                body: dict = self._call_schema(key)
            else:
                array = {"type": "array", "items": self._call_schema(key), "minItems": 1}
                if not many:
                    array["maxItems"] = 1
                body = {"type": "object", "properties": {"tool_calls": array}, "required": ["tool_calls"],
                        "additionalProperties": False}
            call, calls, marker_special = f"%json {json.dumps(body)}", "call", False
        if self.choice == "auto":
            if not marker_special:      # free text and a call cannot be told apart: parse afterwards
                return None
            start = "start: TEXT | TEXT? calls\nTEXT: /[^\\xff]+/\n"
        else:
            start = "start: calls\n"
        lark = f"{start}calls: {calls}\ncall: {call}\n"
        grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
        if is_error:
            raise ValueError("tools: cannot build the tool-call grammar: " + "; ".join(messages))
        return GrammarSpec(grammar, "tools", lark)

    # ---- parsing ----
    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        return parse_tool_calls(self.family, text, {t["function"]["name"] for t in self.tools})


def calls_finish_reason(calls: list, finish_reason: Optional[str]) -> Optional[str]:
    """OpenAI's finish_reason of an output that made calls: "tool_calls" where it ended by
    itself ("stop"); "length" stays (the output was cut, the calls may be incomplete)."""
    return "tool_calls" if calls and finish_reason == "stop" else finish_reason


def _call_for_template(call: Any) -> Any:
    """An OpenAI tool call with its arguments parsed (templates serialize an object)."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    fn = dict(call["function"])
    if isinstance(fn.get("arguments"), str):
        try:
            fn["arguments"] = json.loads(fn["arguments"])
        except json.JSONDecodeError:
            pass
    return {**call, "function": fn, "name": fn.get("name"), "arguments": fn.get("arguments")}


def _as_call(obj: Any, names: set, key: str = "arguments") -> Optional[ToolCall]:
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get(key, obj.get("arguments", obj.get("parameters", {})))
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def parse_tool_calls(family: str, text: str, names: set) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a finished output; text that does not parse as calls stays content.
    Whatever the family, an output that is only a JSON call (small models often drop the
    markup their template shows) is read as one."""
    marker = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]"}.get(family)
    start = text.find(marker) if marker else -1
    if start < 0:
        return _parse_json_calls(family, text, names)
    calls: list = []
    if family == "hermes":
        for m in _HERMES.finditer(text, start):
            try:
                calls.append(_as_call(json.loads(m.group(1)), names))
            except json.JSONDecodeError:
                return text, []
    else:
        try:
            items = json.loads(text[start + len(marker):].strip())
        except json.JSONDecodeError:
            return text, []
        calls = [_as_call(i, names) for i in (items if isinstance(items, list) else [items])]
    return (text[:start].strip(), calls) if calls and all(calls) else (text, [])


def _parse_json_calls(family: str, text: str, names: set) -> tuple[str, list[ToolCall]]:
    stripped = text.strip().removeprefix("<|python_tag|>")
    try:
        obj = json.loads(stripped)
    except json.JSONDecodeError:
        return text, []
    items = obj.get("tool_calls") if isinstance(obj, dict) and "tool_calls" in obj else obj
    items = items if isinstance(items, list) else [items]
    calls = [_as_call(i, names, "parameters" if family == "llama3" else "arguments") for i in items]
    return ("", calls) if calls and all(calls) else (text, [])


class ToolCallStream:
    """Streams a choice's content while holding back what may be tool-call markup: content
    deltas go out as they come until the output may have started a call; from there the text is
    kept, and at the end it is parsed into calls (or, if it is not one, sent as content)."""

    def __init__(self, setup: ToolSetup):
        self.setup = setup
        # (marker, only at the start of the output): a JSON call must be all the output
        self._markers = [(m, False) for m in {"hermes": ["<tool_call>"], "mistral": ["[TOOL_CALLS]"]}.get(
            setup.family, [])] + [("{", True), ("[", True), ("<|python_tag|>", True)]
        self._held = ""
        self._sent = ""        # content already streamed
        self._in_call = False
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> str:
        """Content to stream now."""
        if self._in_call:
            self._held += text
            return ""
        data = self._held + text
        at_start = not self._sent.strip()
        for marker, start_only in self._markers:
            at = data.find(marker)
            if at >= 0 and (not start_only or (at_start and not data[:at].strip())):
                self._in_call = True
                self._held = data[at:]
                return self._send(data[:at])
        keep = 0
        for marker, start_only in self._markers:   # the longest tail that may begin a marker
            for n in range(min(len(marker) - 1, len(data)), 0, -1):
                if data.endswith(marker[:n]) and (not start_only or not data[:len(data) - n].strip()):
                    keep = max(keep, n)
                    break
        if at_start and not data.strip():
            keep = len(data)                   # only whitespace so far: a JSON call may follow
        self._held = data[len(data) - keep:] if keep else ""
        return self._send(data[:len(data) - keep])

    def _send(self, text: str) -> str:
        self._sent += text
        return text

    def finish(self) -> tuple[str, list[ToolCall]]:
        """(content still to stream, calls) at the end of the output."""
        held, self._held = self._held, ""
        if not self._in_call:
            return self._send(held), []
        content, calls = self.setup.parse(held)
        if not calls:
            return self._send(held), []
        self.calls = calls
        return self._send(content), calls
