"""Structured output through a live `localllm serve`, driven by the real `openai` client:
`chat.completions.parse()` with Pydantic models (nested objects, enums, optional fields, lists,
$defs/$ref), llama-server's `json_schema` and `grammar` fields, and 400s that name the schema
feature the server cannot enforce."""
from __future__ import annotations

import json
from enum import Enum
from typing import Optional

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from conftest import model_file
from serving import CHAT, LiveServer


class Role(str, Enum):
    admin = "admin"
    developer = "developer"
    guest = "guest"


class Address(BaseModel):
    city: str = Field(max_length=24)
    country: str = Field(max_length=24)


class Person(BaseModel):
    name: str = Field(max_length=24)
    age: int
    role: Role
    nickname: Optional[str] = Field(max_length=16)
    skills: list[str] = Field(max_length=3)
    address: Address


class Team(BaseModel):
    name: str = Field(max_length=24)
    lead: Person                       # Person and Address become $defs reached by $ref
    members: list[Person] = Field(max_length=2)


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b-q4_k_m", "smollm2-135m-q4_1"])
def server(request):
    with LiveServer(model_file(request.param), "-c", "4096") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def test_parse_returns_pydantic_objects_for_many_seeds(client, model):
    messages = [{"role": "system", "content": "You answer in JSON."},
                {"role": "user", "content": "Invent a small software team: a lead and members."}]
    schema = Team.model_json_schema()
    for seed in range(4):
        completion = client.chat.completions.parse(model=model, messages=messages, response_format=Team,
                                                   temperature=0.8, seed=seed, max_tokens=700)
        choice = completion.choices[0]
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Team)
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_parse_person_greedy_and_json_object_mode(client, model):
    completion = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Describe Ada Lovelace."}], response_format=Person,
        temperature=0.0, max_tokens=300)
    person = completion.choices[0].message.parsed
    assert isinstance(person, Person) and isinstance(person.role, Role)
    if "smollm" in model.lower():        # free-form JSON from a 135M model need not close within a limit
        return
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give me a JSON object about cats."}],
        response_format={"type": "json_object"}, temperature=0.0, max_tokens=200)
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_llama_server_json_schema_and_grammar_fields(server):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    r = httpx.post(server.url + CHAT, timeout=300, json={
        "messages": [{"role": "user", "content": "Pick a number."}], "json_schema": schema, "temperature": 0})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), schema)
    r = httpx.post(server.url + "/v1/completions", timeout=300, json={
        "prompt": "Colour of the sky:", "grammar": 'root ::= "blue" | "grey"', "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("blue", "grey")


@pytest.mark.parametrize("body, field, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "if": {"required": ["a"]}}}}}, "response_format", "if"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "format": "color-hex"}}}}, "response_format", "color-hex"),
    ({"response_format": {"type": "yaml"}}, "response_format", "type must be"),
    ({"grammar": 'root ::= "a" undefined-rule'}, "grammar", "undefined-rule"),
    ({"json_schema": {"type": "object", "dependentSchemas": {"a": {}}}}, "json_schema", "dependentSchemas"),
])
def test_unsupported_schema_is_a_400_naming_it(server, body, field, words):
    r = httpx.post(server.url + CHAT, timeout=60, json={"messages": [{"role": "user", "content": "Hi"}], **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["param"] == field
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
