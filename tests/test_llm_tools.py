"""Tool calling through the Python API (`LLM.chat(..., tools=..., tool_choice=...)`) on
Qwen2.5-Coder (a Hermes-style `<tool_call>` template): forced calls validate against the
function's parameters (jsonschema), the tool's result goes back through the template and the
model answers with it, streamed content never carries the markup, and bad tool arguments are
ValueErrors naming the field."""
from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import llm_for
from tool_defs import ASK, PARAMS, TOOLS

QWEN = "qwen2.5-coder-0.5b-q4_k_m"


def _check_call(call: dict) -> dict:
    """The call's arguments, checked to be OpenAI's shape and valid for its function."""
    assert set(call) == {"id", "type", "function"} and call["type"] == "function" and call["id"]
    assert isinstance(call["function"]["arguments"], str)         # JSON text, as OpenAI sends it
    args = json.loads(call["function"]["arguments"])
    jsonschema.validate(args, PARAMS[call["function"]["name"]])
    return args


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_calls_are_always_valid(tool_choice):
    llm = llm_for(QWEN)
    for seed, prompt in enumerate(["Tell me a joke.", "Hello!", "What time is it in Tokyo?", "Weather in Oslo?"]):
        r = llm.chat([{"role": "user", "content": prompt}], tools=TOOLS, tool_choice=tool_choice,
                     parallel_tool_calls=False, temperature=0.9, seed=seed, max_tokens=200)
        assert r.finish_reason == "tool_calls", r
        assert len(r.tool_calls) == 1 and "<tool_call>" not in r.text
        if isinstance(tool_choice, dict):
            assert r.tool_calls[0]["function"]["name"] == "get_time"
        _check_call(r.tool_calls[0])


def test_agent_loop_tool_result_goes_back_through_the_template():
    llm = llm_for(QWEN)
    first = llm.chat(ASK, tools=TOOLS, tool_choice="required", temperature=0.0, max_tokens=200)
    assert first.finish_reason == "tool_calls"
    call = first.tool_calls[0]
    assert call["function"]["name"] == "get_weather"
    assert _check_call(call)["city"].lower().startswith("paris")
    messages = ASK + [first.message, {"role": "tool", "tool_call_id": call["id"],
                                      "content": json.dumps({"temperature_c": 17})}]
    prompt = llm.render_chat(messages)
    assert "17" in prompt and '"name": "get_weather"' in prompt     # the call and its result, templated
    final = llm.chat(messages, tools=TOOLS, temperature=0.0, max_tokens=120)
    assert final.finish_reason == "stop" and final.tool_calls is None
    assert "17" in final.text and "<tool_call>" not in final.text


def test_auto_lets_the_model_answer_in_text():
    llm = llm_for(QWEN)
    r = llm.chat([{"role": "user", "content": "Say hello in French, one word."}], tools=TOOLS,
                 temperature=0.0, max_tokens=30)
    assert r.finish_reason in ("stop", "length") and r.tool_calls is None and r.text.strip()
    none = llm.chat(ASK, tools=TOOLS, tool_choice="none", temperature=0.0, max_tokens=30)
    assert none.tool_calls is None and "<tool_call>" not in none.text


def test_streamed_content_holds_back_the_markup():
    llm = llm_for(QWEN)
    kwargs = dict(tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=0.0, max_tokens=200)
    whole = llm.chat(ASK, **kwargs)
    stream = llm.stream(llm.make_request(messages=ASK, **kwargs))
    content = "".join(stream)
    assert "tool_call" not in content and stream.finish_reason == "tool_calls"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in stream.tool_calls] == \
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole.tool_calls]


@pytest.mark.parametrize("kwargs, message", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice: .*'nope'"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice: .*'sometimes'"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools: .*name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "if": {}}}}]},
     "tools: .*if"),
    ({"tool_choice": "required"}, "tool_choice: needs tools"),
    ({"tools": TOOLS, "tool_choice": "required", "json_schema": {"type": "object"}}, "tools: .*json_schema"),
])
def test_bad_tool_arguments_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        llm_for(QWEN).chat(ASK, max_tokens=5, **kwargs)


def test_tools_need_messages():
    with pytest.raises(TypeError, match="tools need chat messages"):
        llm_for(QWEN).generate("Weather in Paris?", tools=TOOLS, max_tokens=5)
