"""Chat templates: the models' own templates reproduce llama.cpp's rendered prompts exactly, the
sandbox blocks template escapes, and the HF-compatible environment behaves as HF's does."""
from __future__ import annotations

import functools
import json
from datetime import datetime

import pytest

from conftest import REFERENCE, model_file, read_jsonl
from localllm.gguf import GGUFFile
from localllm.text.chat import (CHATML_TEMPLATE, GEMMA_TEMPLATE, ChatTemplateError, fallback_template,
                           render_chat, validate_messages)

USER = [{"role": "user", "content": "hi"}]


@functools.cache
def file_chat_setup(key: str) -> tuple[str | None, str, str, str]:
    """(chat template or None, bos text, eos text, architecture) from the model file."""
    meta = GGUFFile(str(model_file(key))).metadata
    tokens = meta["tokenizer.ggml.tokens"]
    bos = tokens[meta["tokenizer.ggml.bos_token_id"]] if "tokenizer.ggml.bos_token_id" in meta else ""
    eos = tokens[meta["tokenizer.ggml.eos_token_id"]] if "tokenizer.ggml.eos_token_id" in meta else ""
    return meta.get("tokenizer.chat_template"), bos, eos, meta["general.architecture"]


def chat_rows() -> list[dict]:
    rows = [r for r in read_jsonl(REFERENCE / "greedy.jsonl") if "chat" in r["prompt"]]
    assert {r["model"] for r in rows} >= {"smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m"}
    return rows


@pytest.mark.parametrize("key", ["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m"])
def test_model_template_matches_llama_cpp_rendering(key):
    template, bos, eos, _ = file_chat_setup(key)
    assert template, f"{key} should carry tokenizer.chat_template"
    rows = [r for r in chat_rows() if r["model"] == key]
    assert rows
    for row in rows:
        assert render_chat(row["prompt"]["chat"], template, bos, eos) == row["rendered_prompt"]


def test_gemma_without_template_uses_its_turn_format():
    template, bos, eos, arch = file_chat_setup("gemma3-270m-q4_k_m")
    assert template is None and bos == "<bos>"
    assert fallback_template(arch) == GEMMA_TEMPLATE
    for row in [r for r in chat_rows() if r["model"] == "gemma3-270m-q4_k_m"]:
        assert render_chat(row["prompt"]["chat"], fallback_template(arch), bos, eos) == row["rendered_prompt"]


def test_gemma_turn_format_folds_system_and_names_the_model_role():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi \n"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    assert render_chat(messages, GEMMA_TEMPLATE, "<bos>", "<eos>") == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")


def test_chatml_fallback_shape():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": "A"}]
    expected = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
    assert render_chat(messages, None, "", "", add_generation_prompt=False) == expected
    assert render_chat(messages, "", "", "") == expected + "<|im_start|>assistant\n"
    assert render_chat(messages, CHATML_TEMPLATE, "", "") == expected + "<|im_start|>assistant\n"
    assert fallback_template("llama") == CHATML_TEMPLATE and fallback_template(None) == CHATML_TEMPLATE


@pytest.mark.parametrize("payload", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__ }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ raise_exception.__globals__ }}",
    "{% for m in messages %}{{ m.__class__.__init__.__globals__ }}{% endfor %}",
    "{{ messages.append({'role': 'x'}) }}",
    "{{ messages[0].update({'role': 'x'}) }}",
    "{{ self.__init__.__globals__ }}",
])
def test_sandbox_blocks_template_escapes(payload):
    with pytest.raises(ChatTemplateError):
        render_chat(USER, payload, "", "")


@pytest.mark.parametrize("payload", [
    "{{ 'x' * 100000000 }}", "{{ [0] * 100000000 }}", "{{ 7 ** 10000000 }}",
    "{% for i in range(1000000000) %}{% endfor %}"])
def test_sandbox_bounds_resource_use(payload):
    with pytest.raises(ChatTemplateError):
        render_chat(USER, payload, "", "")


def test_raise_exception_propagates_its_message():
    template = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('Conversation must start with a system message') }}{% endif %}"
    with pytest.raises(ChatTemplateError, match="^Conversation must start with a system message$"):
        render_chat(USER, template, "", "")
    assert issubclass(ChatTemplateError, ValueError)


def test_template_errors_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match="does not compile"):
        render_chat(USER, "{% if %}", "", "")
    with pytest.raises(ChatTemplateError, match="TypeError"):
        render_chat([{"role": "user", "content": None}], CHATML_TEMPLATE, "", "")


@pytest.mark.parametrize("messages,problem", [
    ("hello", "list"), ([], "empty"), (["hi"], "messages\\[0\\]"), ([{"content": "x"}], "role"),
    ([{"role": "", "content": "x"}], "role"), ([{"role": "user"}], "content"),
    ([{"role": "user", "content": 5}], "content")])
def test_invalid_messages(messages, problem):
    with pytest.raises(ChatTemplateError, match=problem):
        render_chat(messages, None, "", "")


def test_messages_pass_through_extra_keys():
    checked = validate_messages([{"role": "assistant", "content": None, "tool_calls": []}])
    assert checked == [{"role": "assistant", "content": None, "tool_calls": []}]


def test_hf_environment_whitespace_control():
    # trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before it
    template = "  {% for m in messages %}\n[{{ m.role }}]\n  {% endfor %}\nend"
    assert render_chat(USER * 2, template, "", "") == "[user]\n[user]\nend"


def test_hf_environment_globals_and_tojson():
    tool = {"name": "get_weather", "description": "Météo <city> & \"région\"",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    out = render_chat(USER, "{{ tools[0] | tojson }}|{{ tools[0] | tojson(indent=2) }}", "", "", tools=[tool])
    assert out == json.dumps(tool, ensure_ascii=False) + "|" + json.dumps(tool, ensure_ascii=False, indent=2)
    assert render_chat(USER, "{{ strftime_now('%Y') }}", "", "") == str(datetime.now().year)
    assert render_chat(USER, "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}", "<s>", "</s>") == "<s>|</s>|True"
    assert render_chat(USER, "{{ date_string is defined }}", "", "") == "False"
    assert render_chat(USER, "{{ date_string }}", "", "", date_string="26 Jul 2024") == "26 Jul 2024"
    assert render_chat(USER, "{% for m in messages %}{% break %}{% endfor %}ok", "", "") == "ok"
    assert render_chat(USER, "{% generation %}{{ messages[0].content }}{% endgeneration %}", "", "") == "hi"


def test_qwen_template_with_tools():
    template, bos, eos, _ = file_chat_setup("qwen2.5-coder-0.5b-q4_k_m")
    tool = {"type": "function", "function": {"name": "add", "parameters": {"a": "int <4>"}}}
    out = render_chat(USER, template, bos, eos, tools=[tool])
    assert out.startswith("<|im_start|>system\nYou are Qwen")
    assert "<tools>\n" + json.dumps(tool, ensure_ascii=False) + "\n</tools>" in out
    assert out.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
