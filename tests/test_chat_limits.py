"""Chat templates from strangers: bounded time and size, nesting errors as ChatTemplateError.

Each template here once hung, allocated gigabytes, or escaped as SyntaxError/RecursionError.
Every one must now fail fast with ChatTemplateError, within a bound well below what
the unbounded template would take, and the process must stay small."""
from __future__ import annotations

import resource
import time

import pytest

from localllm.text.chat import RENDER_TIME_LIMIT_S, ChatTemplateError, render_chat

MESSAGES = [{"role": "user", "content": "Hi"}]

HOSTILE = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "nested loops with output": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "loop over a long string": "{% for c in 'ab' * 500000 %}{% for d in 'ab' * 500000 %}{% endfor %}{% endfor %}",
    "string doubling with +": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                              "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "string doubling with ~": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                              "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "list doubling": "{% set ns = namespace(s=[1]) %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "printf width": "{{ '%999999999s' % 'x' }}",
    "printf star width": "{{ '%*s' % (999999999, 'x') }}",
    "format filter width": "{{ '%999999999d'|format(1) }}",
    "str.format width": "{{ '{:>999999999}'.format('x') }}",
    "str.format nested width": "{{ '{:>{}}'.format('x', 999999999) }}",
    "center filter": "{{ 'x'|center(999999999) }}",
    "str.center": "{{ 'x'.center(999999999) }}",
    "str.ljust": "{{ 'x'.ljust(999999999) }}",
    "indent with a long string": "{{ ('a\n' * 300000)|indent('b' * 100000) }}",
    "join of big parts": "{{ ['a' * 1000000] * 1000|join }}",
    "replace amplification": "{{ ('a' * 1000000).replace('a', 'bbbbbbbbbb') }}",
    "recursive macro": "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "exponential macro": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    "deep if nesting": "{% if true %}" * 200 + "x" + "{% endif %}" * 200,
    "deep for nesting": "{% for i in [1] %}" * 30 + "x" + "{% endfor %}" * 30,
    "deep expression nesting": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "deep filter chain": "{{ 'x'" + "|trim" * 20000 + " }}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_a_template_error(name):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError):
        render_chat(MESSAGES, HOSTILE[name], "<s>", "</s>")
    assert time.monotonic() - t0 < RENDER_TIME_LIMIT_S + 5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 300, f"{name}: peak RSS grew {grown_mb:.0f} MB"


def test_limits_leave_ordinary_templates_alone():
    """Loops, concatenation, widths and filters within the bounds render as Jinja renders them."""
    template = ("{% for m in messages %}{{ '%-6s|' % m['role'] }}{{ '{:>4}'.format(loop.index) }}"
                "{{ (m['content'] ~ '!')|center(9) }}{{ ['a', 'b']|join('-') }}{% endfor %}")
    out = render_chat(MESSAGES * 3, template, "<s>", "</s>")
    assert out == "".join(f"user  |   {i}   Hi!   a-b" for i in (1, 2, 3))


def test_long_conversations_are_not_cut_by_the_size_bound():
    """The text bound scales with the input: a 5 M-character message renders whole."""
    content = "word " * 1_000_000
    out = render_chat([{"role": "user", "content": content}], None, "<s>", "</s>")
    assert content in out
