"""Tool calling through a live `localllm serve` on Qwen2.5-Coder (Hermes-style `<tool_call>`
template), driven by the real `openai` client: an agent loop, forced calls (`required`, a named
function) that always validate against the function's parameters, streamed deltas that merge
to the non-streamed call with no markup in `content`, and 400s for bad tool requests."""
from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from conftest import model_file
from serving import CHAT, LiveServer
from tool_defs import ASK, PARAMS, TOOLS



@pytest.fixture(scope="module")
def server():
    with LiveServer(model_file("qwen2.5-coder-0.5b-q4_k_m"), "-c", "4096") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def _check_call(call) -> dict:
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, PARAMS[call.function.name])
    return args


def test_agent_loop(client, model):
    first = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0.0, max_tokens=200)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content or "<tool_call>" not in choice.message.content
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert _check_call(call)["city"].lower().startswith("paris")
    messages = ASK + [choice.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 17})}]
    final = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, temperature=0.0,
                                           max_tokens=120)
    answer = final.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "17" in answer.message.content and "<tool_call>" not in answer.message.content


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_calls_are_always_valid(client, model, tool_choice):
    prompts = ["Tell me a joke.", "Hello!", "What time is it in Tokyo?", "Weather in Oslo?"]
    for seed, prompt in enumerate(prompts):
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                           tools=TOOLS, tool_choice=tool_choice, temperature=0.9, seed=seed,
                                           max_tokens=200, parallel_tool_calls=False)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert len(choice.message.tool_calls) == 1
        call = choice.message.tool_calls[0]
        if isinstance(tool_choice, dict):
            assert call.function.name == "get_time"
        _check_call(call)


def test_streamed_deltas_merge_to_the_same_call(client, model):
    kwargs = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0.0, max_tokens=200,
                  parallel_tool_calls=False)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    calls: dict[int, dict] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"name": "", "arguments": "", "id": None})
                if d.id:
                    entry["id"] = d.id
                if d.function and d.function.name:
                    entry["name"] += d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert "<tool_call>" not in content and "tool_call" not in content
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole]
    assert all(c["id"] for c in calls.values())


@pytest.mark.parametrize("body, param, words", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "sometimes"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools", "name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "if": {}}}}]}, "tools", "if"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
])
def test_bad_tool_requests_are_400(server, body, param, words):
    r = httpx.post(server.url + CHAT, timeout=60, json={"messages": ASK, **body})
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"] and r.json()["error"]["param"] == param
