"""Fuzz chat templates: arbitrary template text and messages through the sandbox.

Expected: a rendered string or ChatTemplateError. Findings: any other exception, an escape from
the sandbox (an audit event for opening files, running processes, sockets, imports or ctypes
while rendering), a render over the time bound (libFuzzer's -timeout) or an output over the size
bound."""
from __future__ import annotations

import sys

import atheris

import harness

with atheris.instrument_imports(include=harness.INSTRUMENTED):
    import jinja2.debug  # noqa: F401  (imported by Jinja on a template's first error: not during a render)
    from localllm.text import chat
    from localllm.text.chat import ChatTemplateError, render_chat

# (Jinja itself compiles and execs template code; those events are not an escape.)
_FORBIDDEN = ("open", "os.", "subprocess.", "socket.", "import", "ctypes.", "shutil.")
_rendering = False


def _audit(event: str, args: tuple) -> None:
    if _rendering and event.startswith(_FORBIDDEN):
        raise AssertionError(f"sandbox escape: audit event {event} {args!r:.200}")


sys.addaudithook(_audit)

SNIPPETS = [
    chat.CHATML_TEMPLATE, chat.GEMMA_TEMPLATE,
    "{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}{% if not loop.last %}\n{% endif %}{% endfor %}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% set ns = namespace(s='a') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "{{ '%-10s|%5d' % ('x', 3) }}{{ '{:>8}'.format('y') }}{{ 'z'|center(9) }}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
    "{{ raise_exception('no') }}", "{{ messages|tojson }}{{ strftime_now('%Y') }}",
]


def seeds():
    for s in SNIPPETS:
        yield b"\x02" + s.encode()


MESSAGE_POOL = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9\U0001F600"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": ""}]


def test_one_input(data: bytes) -> None:
    """data[0]: how many messages of MESSAGE_POOL; the rest: the template (UTF-8, errors replaced)."""
    global _rendering
    if not data:
        return
    messages = MESSAGE_POOL[:data[0] % (len(MESSAGE_POOL) + 1)] or MESSAGE_POOL[:1]
    template = data[1:].decode("utf-8", "replace")
    try:
        chat._compile(template or chat.CHATML_TEMPLATE)   # Jinja's first compile imports: not audited
    except ChatTemplateError as e:
        harness.feedback("compile", str(e)[:60])
        return
    _rendering = True
    try:
        out = render_chat(messages, template, "<s>", "</s>")
        assert len(out) <= chat.MAX_TEXT_CHARS + 4 * sum(len(m["content"]) for m in messages)
        harness.feedback("rendered", len(out) > 0)
    except ChatTemplateError as e:
        harness.feedback("render", str(e)[:60])
    finally:
        _rendering = False


if __name__ == "__main__":
    harness.run("chat", seeds, test_one_input)
