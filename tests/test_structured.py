"""Constrained decoding: the C++ sampler's token mask, the llguidance tokenizer built from the
GGUF vocabulary, and JSON-schema / grammar constrained generation on the real models, checked
with jsonschema (an independent validator) and against unconstrained runs."""
from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from localllm import _core
from localllm.structured import compile_constraint
from localllm.structured.tokenizer import grammar_tokenizer

from conftest import llm_for

MODELS = ["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m"]

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "zip": {"type": ["string", "null"],
                                                                                "maxLength": 8}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "nickname": {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "null"}]},
    },
    "required": ["name", "age", "role", "tags", "address", "nickname"],
    "additionalProperties": False,
}


def _mask(n_vocab: int, allowed: list[int]) -> np.ndarray:
    words = np.zeros((n_vocab + 31) // 32, np.uint32)
    for t in allowed:
        words[t // 32] |= np.uint32(1 << (t % 32))
    return words


# ---- the sampler's mask ----
@pytest.mark.parametrize("temperature, top_k", [(0.0, 40), (0.8, 40), (1.5, 0), (1.0, 3)])
def test_sampler_draws_only_allowed_tokens(temperature, top_k):
    n_vocab = 1000
    rng = np.random.default_rng(1)
    allowed = sorted(rng.choice(n_vocab, 37, replace=False).tolist())
    mask = _mask(n_vocab, allowed)
    sampler = _core.Sampler(n_vocab=n_vocab, temperature=temperature, top_k=top_k, seed=3)
    for _ in range(200):
        logits = rng.normal(size=n_vocab).astype(np.float32) * 4
        logits[rng.integers(n_vocab)] = 50.0               # a disallowed favourite, mostly
        token = sampler.sample(logits, mask)
        assert token in allowed
        if temperature == 0.0:                             # greedy: the best allowed token
            assert token == max(allowed, key=lambda t: (logits[t], -t))


def test_sampler_distribution_is_renormalized_over_allowed():
    n_vocab = 100
    logits = np.linspace(-2, 2, n_vocab).astype(np.float32)
    allowed = [3, 50, 97]
    sampler = _core.Sampler(n_vocab=n_vocab, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    tokens, probs = sampler.distribution(logits, _mask(n_vocab, allowed))
    expected = np.exp(logits[allowed] - logits[allowed].max())
    assert sorted(tokens.tolist()) == allowed
    np.testing.assert_allclose(probs[np.argsort(tokens)], expected / expected.sum(), rtol=1e-5)


def test_sampler_mask_errors():
    sampler = _core.Sampler(n_vocab=100, temperature=0.0)
    logits = np.zeros(100, np.float32)
    with pytest.raises(ValueError, match="bitmask of 4 words"):
        sampler.sample(logits, np.zeros(3, np.uint32))
    with pytest.raises(RuntimeError, match="grammar allows no token"):
        sampler.sample(logits, np.zeros(4, np.uint32))


# ---- the grammar tokenizer ----
@pytest.mark.parametrize("key", MODELS)
def test_grammar_tokenizer_spells_tokens_as_the_detokenizer(key):
    llm = llm_for(key)
    lt = grammar_tokenizer(llm.tokenizer, llm.engine.n_vocab)
    assert lt is grammar_tokenizer(llm.tokenizer, llm.engine.n_vocab)      # built once per model
    text = 'Héllo {"a": [1, 2.5e3, "ü\\n"]}\n\tdef f(x):  return x  # 日本語'
    ids = llm.tokenize(text, add_special=False)
    assert lt.decode_bytes(ids) == llm.tokenizer.decode_bytes(ids)
    assert set(lt.eos_tokens) == set(llm.tokenizer.eot_ids)
    for t in llm.tokenizer.eot_ids:
        assert lt.is_special_token(t)


# ---- generation ----
@pytest.mark.parametrize("key", MODELS)
def test_json_schema_outputs_validate(key):
    """Many seeded sampled requests, run together in one batch: every output is complete JSON
    that the schema accepts."""
    llm = llm_for(key)
    prompt = llm.render_chat([{"role": "user", "content": "Describe a person as JSON."}])
    requests = [llm.make_request(prompt, json_schema=PERSON, temperature=1.0, max_tokens=300, seed=seed)
                for seed in range(12)]
    results = llm.generate(requests)
    seeds_seen = set()
    for r in results:
        assert r.finish_reason == "stop", r.text
        value = json.loads(r.text)
        jsonschema.validate(value, PERSON)
        assert not re.search(r"\s{21,}", r.text)            # whitespace bounded
        seeds_seen.add(r.text)
    assert len(seeds_seen) > 1            # sampled, not one forced string


def test_masks_beside_or_before_the_forward_give_the_same_output():
    """The masks are computed on a helper thread during the forward, or before it (where the
    forward takes every CPU): the same masks, so the same sampled tokens."""
    llm = llm_for("smollm2-135m-q4_1")
    constraints = llm.engine.constraints
    placement = constraints.overlap
    requests = lambda: [llm.make_request(f"Person {i} as JSON:", json_schema=PERSON, temperature=0.9, seed=i,
                                         max_tokens=120) for i in range(4)]
    try:
        outputs = {}
        for overlap in (True, False):
            constraints.overlap = overlap
            outputs[overlap] = [r.token_ids for r in llm.generate(requests())]
    finally:
        constraints.overlap = placement
    assert outputs[True] == outputs[False]


@pytest.mark.parametrize("key", MODELS)
def test_free_sequences_unchanged_beside_constrained_ones(key):
    llm = llm_for(key)
    free = ["The capital of France is", "def fibonacci(n):"]
    alone = llm.generate(free, temperature=0.7, seed=11, max_tokens=24)
    mixed = llm.generate(free + ["Give me JSON:"] * 2, temperature=0.7, seed=11, max_tokens=24)
    assert [r.token_ids for r in mixed[:2]] == [r.token_ids for r in alone]
    engine = llm.engine
    constrained = engine.submit(llm.tokenize("A JSON object:"),
                                llm.requests.params({"json_schema": PERSON, "temperature": 0.0,
                                                     "max_tokens": 60}))
    free_ids = [engine.submit(llm.tokenize(p), llm.requests.params({"temperature": 0.7, "seed": 11,
                                                                     "max_tokens": 24})) for p in free]
    outs = {rid: [t for o in engine.outputs(rid) for t in o.token_ids] for rid in [constrained, *free_ids]}
    assert [outs[rid] for rid in free_ids] == [r.token_ids for r in alone]


def test_grammar_and_regex_constrain_greedy_output():
    llm = llm_for("qwen2.5-coder-0.5b-q4_k_m")
    prompt = llm.render_chat([{"role": "user", "content": "Is the sky green? Answer yes or no."}])
    r = llm.generate(prompt, grammar='root ::= ("yes" | "no") "."', temperature=0.0)
    assert r.text in ("yes.", "no.") and r.finish_reason == "stop"
    r = llm.generate(prompt, regex=r"[0-9]{3}-[0-9]{4}", temperature=0.9, seed=1)
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", r.text) and r.finish_reason == "stop"
    r = llm.generate(prompt, response_format={"type": "json_object"}, temperature=0.0, max_tokens=120)
    assert isinstance(json.loads(r.text), dict) and r.finish_reason == "stop"


def test_max_tokens_inside_a_structure_is_length():
    llm = llm_for("smollm2-135m-q4_1")
    r = llm.generate("Person:", json_schema=PERSON, max_tokens=5, temperature=0.0)
    assert r.finish_reason == "length" and len(r.token_ids) == 5


def test_whitespace_stays_bounded_when_the_model_wants_only_newlines():
    llm = llm_for("smollm2-135m-q4_1")
    newline = llm.tokenize("\n", add_special=False)
    space = llm.tokenize(" ", add_special=False)
    bias = {newline[0]: 40.0, space[0]: 40.0}
    r = llm.generate("JSON:", response_format={"type": "json_object"}, logit_bias=bias, temperature=0.0,
                     max_tokens=200)
    assert r.finish_reason == "stop", repr(r.text)
    assert isinstance(json.loads(r.text), dict)
    assert not re.search(r"\s{21,}", r.text)


# ---- bad input ----
@pytest.mark.parametrize("kwargs, message", [
    ({"json_schema": {"type": "object", "if": {"required": ["a"]}}}, r"if"),
    ({"json_schema": {"type": "string", "format": "color-hex"}}, r"format: color-hex"),
    ({"json_schema": "{not json"}, r"not valid JSON"),
    ({"json_schema": [1, 2]}, r"must be a JSON object"),
    ({"grammar": 'root ::= "a" missing'}, r"missing"),
    ({"grammar": ""}, r"non-empty"),
    ({"regex": "(unclosed"}, r"regex: invalid"),
    ({"response_format": {"type": "xml"}}, r"response_format: type must be"),
    ({"response_format": {"type": "json_schema"}}, r"'schema'"),
    ({"json_schema": {"type": "object"}, "grammar": 'root ::= "a"'}, r"at most one"),
])
def test_invalid_constraints_are_value_errors_naming_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compile_constraint(**kwargs)
    llm = llm_for("smollm2-135m-q4_1")
    with pytest.raises(ValueError, match=message):
        llm.generate("x", **kwargs)


# ---- speculative decoding ----
_SPEC: dict = {}


def _speculating(key: str, mode: str):
    from localllm import LLM
    from conftest import model_file
    if (key, mode) not in _SPEC:
        _SPEC[(key, mode)] = LLM(str(model_file(key)), n_ctx=4096, seed=0, speculative=mode)
    return _SPEC[(key, mode)]


@pytest.mark.parametrize("key", MODELS)
def test_grammar_with_speculation_is_token_identical_when_greedy(key):
    """n-gram drafts (a repetitive JSON list drafts well, and is often rejected at its ends):
    a mask per draft position, rejected drafts never advance the grammar."""
    schema = {"type": "array", "items": PERSON["properties"]["address"], "minItems": 3, "maxItems": 5}
    prompt = "Addresses as JSON: "
    plain, spec = llm_for(key), _speculating(key, "ngram")
    before = spec.engine.stats.spec_drafted
    want = plain.generate(prompt, json_schema=schema, temperature=0.0, max_tokens=250)
    got = spec.generate(prompt, json_schema=schema, temperature=0.0, max_tokens=250)
    s = spec.engine.stats
    assert s.spec_drafted > before and s.spec_accepted < s.spec_drafted, "no draft, or none rejected"
    assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
    jsonschema.validate(json.loads(got.text), schema)
    sampled = spec.generate([spec.make_request(prompt, json_schema=schema, temperature=0.8, seed=s_,
                                               max_tokens=250) for s_ in range(4)])
    for r in sampled:
        assert r.finish_reason == "stop"
        jsonschema.validate(json.loads(r.text), schema)
