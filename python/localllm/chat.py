"""Chat prompts: render a conversation with a GGUF file's ``tokenizer.chat_template``.

Templates come from model files, i.e. from strangers, so they run in Jinja's
ImmutableSandboxedEnvironment: no access to Python internals (CVE-2024-34359, where
``{{ ''.__class__.__mro__[1].__subclasses__() }}`` reached arbitrary code), no mutation of the
passed objects, bounded ``range``, and here also bounded ``*`` / ``**`` so a template cannot
exhaust memory or CPU through string repetition or huge powers. Everything that goes wrong while
compiling or rendering surfaces as :class:`ChatTemplateError`.

The environment mirrors Hugging Face's ``apply_chat_template``: ``trim_blocks`` and
``lstrip_blocks`` on, the ``loopcontrols`` extension, a ``tojson`` filter that does not
HTML-escape (``json.dumps`` with ``ensure_ascii=False``), and the globals ``raise_exception``
and ``strftime_now``; a template sees ``messages``, ``add_generation_prompt``, ``bos_token``,
``eos_token``, ``tools`` (None unless given) and, when given, ``date_string``.
"""
from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = [
    "CHATML_TEMPLATE",
    "GEMMA_TEMPLATE",
    "ChatTemplateError",
    "fallback_template",
    "render_chat",
    "validate_messages",
]

# The ChatML turn format, used when a model file carries no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Gemma's documented turn format (Gemma GGUFs often ship without a template): BOS, then
# "<start_of_turn>{user|model}\n{content}<end_of_turn>\n" with content trimmed; the assistant
# role is called "model" and a system message is folded into the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{% set ns.system = ns.system + (message['content'] | trim) + '\\n\\n' %}"
    "{% else %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + ns.system + (message['content'] | trim) + '<end_of_turn>\\n' }}"
    "{% set ns.system = '' %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

_GEMMA_ARCHITECTURES = {"gemma", "gemma2", "gemma3", "gemma3n"}

# Bounds on what one template operation may build (sandbox resource limits).
_MAX_REPEAT_LEN = 1_000_000      # characters / items produced by `x * n`
_MAX_POWER_BITS = 100_000        # bits of an integer produced by `a ** b`


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render, or tried something the sandbox forbids."""


def fallback_template(architecture: str | None) -> str:
    """Template for a model file without ``tokenizer.chat_template``: Gemma's turn format for
    Gemma architectures, ChatML otherwise."""
    if architecture is not None and architecture.lower() in _GEMMA_ARCHITECTURES:
        return GEMMA_TEMPLATE
    return CHATML_TEMPLATE


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """Check a conversation and return it as a list of plain dicts.

    Each message is a mapping with a non-empty string ``role`` and a ``content`` that is a
    string, None (e.g. an assistant turn that only calls tools) or a list of content parts.
    Other keys (``tool_calls``, ``name``, ``tool_call_id``...) pass through.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError(f"messages must be a list of {{role, content}} dicts, got {type(messages).__name__}")
    if not messages:
        raise ChatTemplateError("messages must not be empty")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"messages[{i}] must be a dict with 'role' and 'content', "
                                    f"got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ChatTemplateError(f"messages[{i}]['role'] must be a non-empty string, got {role!r}")
        if "content" not in message:
            raise ChatTemplateError(f"messages[{i}] has no 'content'")
        content = message["content"]
        if content is not None and not isinstance(content, (str, list)):
            raise ChatTemplateError(f"messages[{i}]['content'] must be a string, a list of parts or None, "
                                    f"got {type(content).__name__}")
        checked.append(dict(message))
    return checked


class _GenerationTagExtension(jinja2.ext.Extension):
    """Accepts HF's ``{% generation %}...{% endgeneration %}`` markers (used for assistant-token
    masks in training) and renders their body unchanged."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[jinja2.nodes.Node]:
        next(parser.stream)  # the "generation" name token
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _ChatSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with bounded string/list repetition and integer powers."""

    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # Jinja returns an Undefined that only fails when used; `{{ ''.__class__ }}` would then
        # print nothing. Fail at the access instead, with a clear message.
        raise ChatTemplateError(f"chat template tried to access attribute {attribute!r} of a "
                                f"{type(obj).__name__} object, which the sandbox forbids")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                    if len(seq) * max(count, 0) > _MAX_REPEAT_LEN:
                        raise ChatTemplateError("chat template: repetition result too large")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if max(abs(left).bit_length(), 1) * right > _MAX_POWER_BITS:
                raise ChatTemplateError("chat template: power result too large")
        return super().call_binop(context, operator, left, right)


def _raise_exception(message: Any) -> None:
    raise ChatTemplateError(str(message))


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@functools.lru_cache(maxsize=1)
def _environment() -> _ChatSandbox:
    env = _ChatSandbox(trim_blocks=True, lstrip_blocks=True,
                       extensions=[jinja2.ext.loopcontrols, _GenerationTagExtension])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    try:
        return _environment().from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template does not compile: {e.message} (line {e.lineno})") from e
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template does not compile: {e}") from e


def render_chat(messages: Sequence[Mapping[str, Any]], template: str | None, bos_token: str,
                eos_token: str, add_generation_prompt: bool = True, *,
                tools: list[dict[str, Any]] | None = None, date_string: str | None = None,
                extra_context: Mapping[str, Any] | None = None) -> str:
    """Render messages into a prompt string with a chat template (ChatML when template is None
    or empty). ``extra_context`` adds template variables (e.g. ``enable_thinking``).

    Raises ChatTemplateError for invalid messages, templates that do not compile, templates
    that call ``raise_exception`` (with its message), and sandbox violations.
    """
    checked = validate_messages(messages)
    if template is not None and not isinstance(template, str):
        raise ChatTemplateError(f"template must be a string or None, got {type(template).__name__}")
    compiled = _compile(template or CHATML_TEMPLATE)
    context: dict[str, Any] = dict(extra_context or {})
    context.update(messages=checked, add_generation_prompt=bool(add_generation_prompt),
                   bos_token=bos_token, eos_token=eos_token, tools=tools)
    if date_string is not None:
        context["date_string"] = date_string
    try:
        return compiled.render(**context)
    except ChatTemplateError:
        raise
    except jinja2.exceptions.SecurityError as e:
        raise ChatTemplateError(f"chat template tried an operation the sandbox forbids: {e}") from e
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template failed: {e}") from e
    except Exception as e:  # a template bug (e.g. str + None): still the template's error
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from e
