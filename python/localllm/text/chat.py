"""Chat prompts: render a conversation with a GGUF file's ``tokenizer.chat_template``.

Templates come from model files, i.e. from strangers, so they run in Jinja's
ImmutableSandboxedEnvironment: no access to Python internals (CVE-2024-34359, where
``{{ ''.__class__.__mro__[1].__subclasses__() }}`` reached arbitrary code), no mutation of the
passed objects, bounded ``range``. Here a render is also bounded in time and size: every loop
step, call and filter checks a deadline (:data:`RENDER_TIME_LIMIT_S`) and a step count; every
string or list a template builds (``+``, ``~``, ``*``, ``%``, ``format``, filters and string
methods with a width or count) and the output itself are held to :data:`MAX_TEXT_CHARS` (or four
times the input, when that is more), checked before the allocation where the size can be known
first; ``**`` is bounded too. Everything that goes wrong while compiling (nesting too deep for
the parser or for Python included) or rendering surfaces as :class:`ChatTemplateError`.

The environment mirrors Hugging Face's ``apply_chat_template``: ``trim_blocks`` and
``lstrip_blocks`` on, the ``loopcontrols`` extension, a ``tojson`` filter that does not
HTML-escape (``json.dumps`` with ``ensure_ascii=False``), and the globals ``raise_exception``
and ``strftime_now``; a template sees ``messages``, ``add_generation_prompt``, ``bos_token``,
``eos_token``, ``tools`` (None unless given) and, when given, ``date_string``.
"""
from __future__ import annotations

import contextvars
import functools
import json
import re
import string
import time
from datetime import datetime
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.visitor
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
MAX_TEXT_CHARS = 4_000_000       # any string / list a template builds, and its output
RENDER_TIME_LIMIT_S = 5.0        # wall time of one render
_MAX_STEPS = 10_000_000          # loop iterations + calls + filters of one render
_MAX_TEMPLATE_CHARS = 1_000_000  # the template's own source


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render, or tried something the sandbox forbids."""


class _RenderBudget:
    """Time, steps and text size one render may use (one per render, in a context variable)."""

    def __init__(self, input_chars: int):
        self.deadline = time.monotonic() + RENDER_TIME_LIMIT_S
        self.steps = 0
        self.max_chars = max(MAX_TEXT_CHARS, 4 * input_chars)

    def step(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise ChatTemplateError(f"chat template: more than {_MAX_STEPS} loop steps and calls")
        if self.steps % 256 == 0 and time.monotonic() > self.deadline:
            raise ChatTemplateError(f"chat template: rendering took over {RENDER_TIME_LIMIT_S:g} s")

    def check_size(self, n: int, what: str) -> None:
        if n > self.max_chars:
            raise ChatTemplateError(f"chat template: {what} of {n} characters/items is over the "
                                    f"limit of {self.max_chars}")


_BUDGET: contextvars.ContextVar[_RenderBudget] = contextvars.ContextVar("chat_render_budget")


def _budget() -> _RenderBudget:
    """The current render's budget. Outside render_chat (a template rendered some other way) a
    fresh one per check: sizes are still bounded, time and steps are render_chat's to count."""
    budget = _BUDGET.get(None)
    return budget if budget is not None else _RenderBudget(0)


def _check_result(value: Any, what: str) -> Any:
    if isinstance(value, (str, list, tuple)):
        _budget().check_size(len(value), what)
    return value


# printf-style conversions: `%(name)-*.*s`; widths and precisions are what can allocate.
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_widths(numbers: Sequence[Any], what: str) -> None:
    for n in numbers:
        if isinstance(n, str) and n.isdigit():
            n = int(n) if len(n) < 12 else 10**12
        if isinstance(n, int) and not isinstance(n, bool):
            _budget().check_size(n, what)


def _check_percent(fmt: str, args: Any) -> None:
    """Refuse `fmt % args` whose widths or precisions (literal or `*`) exceed the text bound."""
    specs = _PERCENT_SPEC.findall(fmt)
    _check_widths([n for spec in specs for n in spec], "printf width")
    if any("*" in spec for spec in specs):
        _check_widths(list(args) if isinstance(args, tuple) else [args], "printf width")


def _check_format_spec(fmt: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse str.format / format_map calls whose field widths exceed the text bound."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError as e:
        raise ChatTemplateError(f"chat template: bad format string: {e}") from e
    for _, _, spec, _ in fields:
        if spec:
            _check_widths(re.findall(r"\d+", spec), "format width")
            if "{" in spec:   # nested width fields take their numbers from the arguments
                _check_widths([*args, *kwargs.values()], "format width")


def _precheck_call(func: Any, args: tuple, kwargs: dict) -> None:
    """Size checks made before a string method runs, where its result size can be known."""
    owner = getattr(func, "__self__", None)
    if not isinstance(owner, str):
        return
    name = getattr(func, "__name__", "")
    if name in ("center", "ljust", "rjust", "zfill", "expandtabs"):
        _check_widths([*args, *kwargs.values()], f"str.{name} width")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = owner.count(args[0]) if args[0] else len(owner) + 1
        _budget().check_size(len(owner) + count * len(args[1]), "str.replace result")
    elif name == "join" and args and isinstance(args[0], (list, tuple)):
        parts = args[0]
        _budget().check_size(sum(len(p) for p in parts if isinstance(p, str)) + len(owner) * len(parts),
                             "str.join result")


def _bounded_filter(name: str, func: Any) -> Any:
    """A filter with the render's step/deadline check and result-size check around it, and
    size pre-checks for the filters that can amplify (width, indent, join, replace, format)."""

    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment))]
        if name in ("center", "wordwrap", "truncate", "indent"):
            _check_widths(values[1:] + list(kwargs.values()), f"{name} width")
            if name == "indent" and len(values) >= 2 and isinstance(values[0], str):
                width = values[1]
                pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
                budget.check_size(len(values[0]) + (values[0].count("\n") + 1) * pad, "indent result")
        elif name == "format" and values and isinstance(values[0], str):
            _check_percent(values[0], tuple(values[1:]) or kwargs)
        elif name == "join" and values and isinstance(values[0], (list, tuple)):
            sep = values[1] if len(values) > 1 and isinstance(values[1], str) else ""
            budget.check_size(sum(len(v) for v in values[0] if isinstance(v, str)) + len(sep) * len(values[0]),
                              "join result")
        elif name == "replace" and len(values) >= 3 and all(isinstance(v, str) for v in values[:3]):
            count = values[0].count(values[1]) if values[1] else len(values[0]) + 1
            budget.check_size(len(values[0]) + count * len(values[2]), "replace result")
        return _check_result(func(*args, **kwargs), f"filter {name} result")

    return bounded


def _bounded_iter(iterable: Any) -> Any:
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


def _bounded_concat(parts: list) -> str:
    texts = [str(p) for p in parts]
    _budget().check_size(sum(len(t) for t in texts), "`~` concatenation")
    return "".join(texts)


class _BoundLoopsAndConcats(jinja2.visitor.NodeTransformer):
    """Rewrites a parsed template so every `for` iterates through _bounded_iter and every `~`
    goes through _bounded_concat (filters registered under the names below)."""

    def visit_For(self, node: jinja2.nodes.For) -> jinja2.nodes.Node:
        node = self.generic_visit(node)
        node.iter = jinja2.nodes.Filter(node.iter, "_lll_bounded_iter", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: jinja2.nodes.Concat) -> jinja2.nodes.Node:
        node = self.generic_visit(node)
        return jinja2.nodes.Filter(jinja2.nodes.List(node.nodes, lineno=node.lineno), "_lll_bounded_concat",
                                   [], [], None, None, lineno=node.lineno)


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

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # Jinja returns an Undefined that only fails when used; `{{ ''.__class__ }}` would then
        # print nothing. Fail at the access instead, with a clear message.
        raise ChatTemplateError(f"chat template tried to access attribute {attribute!r} of a "
                                f"{type(obj).__name__} object, which the sandbox forbids")

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        return _BoundLoopsAndConcats().visit(super()._parse(source, name, filename))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _budget().step()
        _precheck_call(__obj, args, kwargs)
        return _check_result(super().call(__context, __obj, *args, **kwargs), "call result")

    def wrap_str_format(self, value: Any) -> Any:
        # Jinja swaps str.format / format_map for a sandboxed formatter when it is looked up;
        # the field widths are checked before that formatter runs.
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def bounded_format(*args: Any, **kwargs: Any) -> str:
            mapping = args[0] if value.__name__ == "format_map" and args and isinstance(args[0], Mapping) else kwargs
            _check_format_spec(fmt, args, mapping)
            return _check_result(wrapped(*args, **kwargs), "format result")

        return bounded_format

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _budget().step()
        if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            _budget().check_size(len(left) + len(right), "`+` result")
        elif operator == "%" and isinstance(left, str):
            _check_percent(left, right)
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
    env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
    env.filters["_lll_bounded_iter"] = _bounded_iter
    env.filters["_lll_bounded_concat"] = _bounded_concat
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    if len(template) > _MAX_TEMPLATE_CHARS:
        raise ChatTemplateError(f"chat template of {len(template)} characters is over the limit of "
                                f"{_MAX_TEMPLATE_CHARS}")
    try:
        return _environment().from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template does not compile: {e.message} (line {e.lineno})") from e
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template does not compile: {e}") from e
    except (RecursionError, SyntaxError, MemoryError) as e:
        # Jinja's parser recurses per nesting level, and Python's compiler refuses more than 20
        # nested blocks: deep nesting lands here rather than in Jinja's own errors.
        raise ChatTemplateError(f"chat template nests too deeply to compile ({type(e).__name__}: {e})") from e


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
    input_chars = sum(len(m["content"]) for m in checked if isinstance(m.get("content"), str))
    input_chars += len(json.dumps(tools, default=str)) if tools else 0
    token = _BUDGET.set(_RenderBudget(input_chars))
    try:
        return _render_bounded(compiled, context)
    except ChatTemplateError:
        raise
    except jinja2.exceptions.SecurityError as e:
        raise ChatTemplateError(f"chat template tried an operation the sandbox forbids: {e}") from e
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template failed: {e}") from e
    except Exception as e:  # a template bug (e.g. str + None): still the template's error
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from e
    finally:
        _BUDGET.reset(token)


def _render_bounded(compiled: jinja2.Template, context: dict[str, Any]) -> str:
    """The template's output, chunk by chunk, stopped once it passes the size bound."""
    budget, out, size = _budget(), [], 0
    for chunk in compiled.generate(**context):
        size += len(chunk)
        budget.check_size(size, "output")
        budget.step()
        out.append(chunk)
    return "".join(out)
