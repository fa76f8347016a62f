"""Bad input to the library: each a clear error, never a crash."""
from __future__ import annotations

import numpy as np
import pytest

from localllm import LLM, GGUFError
from conftest import llm_for


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        LLM(str(tmp_path / "missing.gguf"))


def test_not_a_gguf(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"\x00" * 4096)
    with pytest.raises(GGUFError, match="magic"):
        LLM(str(p))


def test_unsupported_architecture_names_it_and_lists_supported(tmp_path):
    import gguf
    p = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(p), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"unsupported architecture 'mamba'.*llama.*qwen2"):
        LLM(str(p))


def test_prompt_longer_than_context():
    llm = llm_for("smollm2-135m-q4_1")
    with pytest.raises(ValueError, match="longer than the context"):
        llm.generate([1] * (llm.n_ctx + 1), max_tokens=1)


@pytest.mark.parametrize("kwargs,field", [
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"min_p": 2.0}, "min_p"),
    ({"top_k": -1}, "top_k"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"repeat_penalty": 0.0}, "repeat_penalty"),
])
def test_invalid_sampling_values(kwargs, field):
    llm = llm_for("smollm2-135m-q4_1")
    with pytest.raises(ValueError, match=field):
        llm.generate("hello", **kwargs)


def test_token_ids_out_of_range():
    llm = llm_for("smollm2-135m-q4_1")
    with pytest.raises(ValueError, match="out of range"):
        llm.generate([llm.n_vocab + 5], max_tokens=1)
    with pytest.raises(ValueError, match="out of range"):
        llm.logits([-1, 2])


def test_template_cannot_reach_python_internals():
    from localllm.text.chat import ChatTemplateError
    llm = llm_for("smollm2-135m-q4_1")
    llm_template = llm.chat_template
    try:
        llm.chat_template = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
        with pytest.raises(ChatTemplateError):
            llm.chat([{"role": "user", "content": "hi"}], max_tokens=1)
    finally:
        llm.chat_template = llm_template


def test_engine_survives_bad_requests():
    llm = llm_for("smollm2-135m-q4_1")
    for bad in ([], [llm.n_vocab]):
        with pytest.raises(ValueError):
            llm.generate(bad, max_tokens=1)
    assert llm.generate("The capital of France is", max_tokens=2, temperature=0).token_ids
