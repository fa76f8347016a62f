"""The converter's readers on malformed input, and SIGTERM during a write: each must
end in a CheckpointError naming the problem (or a clean exit), never a traceback or a stray
temporary file."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from localllm_convert.archs.base import ArchConverter
from localllm_convert.checkpoint import Checkpoint, CheckpointError

REPO = Path(__file__).resolve().parent.parent


def checkpoint_dir(tmp_path: Path, config_text: str) -> Path:
    (tmp_path / "config.json").write_text(config_text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("text, needle", [
    ("[1, 2]", "config.json must be a JSON object, got a JSON list"),
    ('"llama"', "config.json must be a JSON object, got a JSON str"),
    ("null", "config.json must be a JSON object, got a JSON NoneType"),
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
])
def test_config_json_not_an_object(tmp_path, text, needle):
    with pytest.raises(CheckpointError, match=needle):
        Checkpoint(checkpoint_dir(tmp_path, text))


@pytest.mark.parametrize("archs", [7, "LlamaForCausalLM", [7], {"a": 1}])
def test_architectures_not_a_list_of_names(tmp_path, archs):
    """Fuzzer finding (fuzz_convert.py, input {"architectures": 0...}): TypeError traceback."""
    ckpt = Checkpoint.__new__(Checkpoint)
    ckpt.config = {"architectures": archs}
    with pytest.raises(CheckpointError, match="'architectures' must be a list of names"):
        _ = ckpt.architecture


def test_config_json_not_utf8(tmp_path):
    (tmp_path / "config.json").write_bytes(b'{"a": "\xff\xfe"}')
    with pytest.raises(CheckpointError, match="not UTF-8"):
        Checkpoint(tmp_path)


class _Rope(ArchConverter):
    """Only rope_parameters() of the base class, on a bare config (no checkpoint needed)."""

    def __init__(self, config: dict):
        self.config = config


BAD_SCALING = [{"rope_type": "yarn"}, {"rope_type": "linear"},
               {"rope_type": "yarn", "factor": "x", "original_max_position_embeddings": 4096},
               {"rope_type": "linear", "factor": [2]}, {"rope_type": "linear", "factor": 0},
               {"rope_type": "linear", "factor": 10**400},
               {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": -4096}]


@pytest.mark.parametrize("arch_module, cls_name, scaling",
                         [("llama", "LlamaConverter", s) for s in BAD_SCALING] +
                         [("gemma3", "Gemma3Converter", s) for s in BAD_SCALING if s["rope_type"] == "linear"])
def test_rope_scaling_without_a_usable_factor(arch_module, cls_name, scaling):
    import importlib
    cls = getattr(importlib.import_module(f"localllm_convert.archs.{arch_module}"), cls_name)
    conv = cls.__new__(cls)
    conv.config = {"rope_scaling": scaling, "rope_theta": 10000.0, "sliding_window": 512}

    class Hp:   # the hyper-parameters write_metadata reads, any values
        n_layer = n_embd = n_ff = n_head = n_head_kv = head_dim = vocab_size = 8
        n_ctx, rms_eps = 128, 1e-6
    conv.hp = Hp()

    class AnyWriter:   # accepts every add_* call
        def __getattr__(self, name):
            return lambda *a, **k: None
    bad_key = "original_max_position_embeddings" if scaling.get("factor") == 2.0 else "factor"
    with pytest.raises(CheckpointError, match=f"rope scaling of type '{scaling['rope_type']}'.*{bad_key}"):
        conv.write_metadata(AnyWriter())


def test_rope_parameters_not_an_object():
    with pytest.raises(CheckpointError, match="rope_parameters must be a JSON object"):
        _Rope({"rope_parameters": [1, 2]}).rope_parameters()


SLOW_WRITE = """
    import sys, time
    import numpy as np
    from localllm_convert.filetypes import QT
    from localllm_convert.writer import OutputTensor, write_gguf

    def slow():
        time.sleep(5)           # the SIGTERM arrives while this tensor is being read
        return np.zeros((4, 32), np.float32)

    tensors = [OutputTensor("a", (4, 32), QT.F32, lambda: np.zeros((4, 32), np.float32), 512),
               OutputTensor("b", (4, 32), QT.F32, slow, 512)]
    write_gguf(sys.argv[1], "llama", lambda w: None, tensors, threads=1, progress=False)
"""


def test_sigterm_during_write_leaves_no_partial_file(tmp_path):
    out = tmp_path / "model.gguf"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "convert"), str(REPO / "python"),
                                                        os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLOW_WRITE), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".*.partial")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob(".*.partial")), "the writer never started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.parametrize("tokenizer_json, needle", [
    # fuzz_convert.py finding: an added token without "id" (KeyError traceback)
    ({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"content": "<s>"}]}, "token '<s>' has id None"),
    ({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [7]}, "needs an 'id'"),
    ({"model": {"type": "BPE", "vocab": {"a": "zero"}}}, "has id 'zero'"),
    ({"model": {"type": "BPE", "vocab": {"a": 10**12}}}, "has id 1000000000000"),   # would build 10^12 tokens
    ({"model": {"type": "BPE", "vocab": {}}}, "has no tokens"),
    ([1, 2], "must be a JSON object"),
    ({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": {"id": 1}}, "added_tokens must be a list"),
    # a template naming a special token it does not define: a Rust panic inside the tokenizers
    # library (pyo3's PanicException, a BaseException that `except Exception` let through)
    ({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}],
                         "pair": [], "special_tokens": {}}}, "cannot be loaded by the tokenizers library"),
])
def test_tokenizer_json_checked(tokenizer_json, needle):
    from localllm_convert.vocab import VocabError
    from localllm_convert.vocab_bpe import load_bpe_vocab
    with pytest.raises(VocabError, match=needle):
        load_bpe_vocab(tokenizer_json, None)


def _checkpoint(tmp_path: Path, config: dict, tokenizer: dict, **extra_json) -> Path:
    """A directory as `localllm convert` reads it: config.json, tokenizer.json, any other JSON
    files and a one-tensor safetensors file."""
    import json
    import struct
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    for name, value in extra_json.items():
        (tmp_path / name).write_text(json.dumps(value))
    header = json.dumps({"embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [4, 32],
                                                              "data_offsets": [0, 512]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(512))
    return tmp_path


LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
BERT = {"architectures": ["BertForSequenceClassification"], "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4, "max_position_embeddings": 64,
        "id2label": {"0": "LABEL_0"}}
BPE = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3}, "merges": ["a b"]},
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}}
WORDPIECE = {"model": {"type": "WordPiece", "vocab": {"[CLS]": 0, "[SEP]": 1, "a": 2, "##b": 3}}}


@pytest.mark.parametrize("config, tokenizer, extra, needle", [
    # fuzz_convert.py finding: a null (or a list) where a number belongs ended in float()'s TypeError
    ({**LLAMA, "rms_norm_eps": None}, BPE, {}, None),      # null means "absent": the default
    ({**LLAMA, "rms_norm_eps": [1e-5]}, BPE, {}, "rms_norm_eps must be a number"),
    ({**LLAMA, "rms_norm_eps": "1e-5"}, BPE, {}, "rms_norm_eps must be a number"),
    ({**LLAMA, "rope_theta": {"a": 1}}, BPE, {}, "rope_theta must be a number"),
    ({**LLAMA, "rope_theta": 1e400}, BPE, {}, "rope_theta must be a finite number"),
    ({**LLAMA, "max_position_embeddings": [64]}, BPE, {}, "max_position_embeddings must be a positive integer"),
    ({**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1e400}},
     BPE, {}, "type 'yarn': original_max_position_embeddings must be a finite number"),
    (LLAMA, {**BPE, "added_tokens": [{"id": "x", "content": "<s>"}]}, {}, "has id 'x'"),
    (LLAMA, BPE, {"tokenizer_config.json": [1]}, "tokenizer_config.json must be a JSON object"),
    (LLAMA, BPE, {"tokenizer_config.json": {"added_tokens_decoder": {"3": "<s>"}}}, "needs an 'id' and a string 'content'"),
    (LLAMA, BPE, {"generation_config.json": 5}, "generation_config.json must be a JSON object"),
    (LLAMA, {**BPE, "post_processor": {"type": "TemplateProcessing", "single": [1, 2]}}, {},
     "cannot be loaded by the tokenizers library"),
    ({**BERT, "layer_norm_eps": True}, WORDPIECE, {}, "layer_norm_eps must be a number"),
    ({**BERT, "id2label": [1]}, WORDPIECE, {}, "id2label must map class numbers to names"),
    ({**BERT, "type_vocab_size": "2"}, WORDPIECE, {}, "type_vocab_size must be a positive integer"),
    # found by a structured probe: 2**70 placeholder tokens (or layer names) filled the memory
    ({**BERT, "vocab_size": 2**70}, WORDPIECE, {}, "vocab_size must be a positive integer up to 16777216"),
    ({**LLAMA, "num_hidden_layers": 10**12}, BPE, {}, "num_hidden_layers must be a positive integer up to 4096"),
    ({**LLAMA, "architectures": ["Gemma3ForCausalLM"], "sliding_window": 16, "layer_types": True}, BPE, {},
     "layer_types must be a list"),
    ({**BERT, "architectures": ["NomicBertModel"], "head_dim": {"a": 1}}, WORDPIECE, {}, "head_dim must be a positive"),
    ({**LLAMA, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 2, "num_experts_per_tok": 1,
      "moe_intermediate_size": 32, "norm_topk_prob": True, "mlp_only_layers": True}, BPE, {}, "mlp_only_layers=True"),
    ({**BERT, "architectures": ["NomicBertModel"], "rope_theta": None, "rope_parameters": {"rope_theta": None}},
     WORDPIECE, {}, None),
    (BERT, {**WORDPIECE, "model": True}, {}, "no WordPiece vocabulary"),
    (BERT, {"model": {"type": "WordPiece", "vocab": {"a": [0]}}}, {}, "token 'a' has id \\[0\\]"),
    (BERT, {**WORDPIECE, "added_tokens": [None]}, {}, "needs an 'id' and a string 'content'"),
])
def test_malformed_values_are_named(tmp_path, config, tokenizer, extra, needle):
    """Every reader a conversion runs (config, vocabulary, special tokens, metadata) on a value
    of the wrong JSON type: a CheckpointError/VocabError naming the key, never float()'s or
    dict.get's traceback; ``needle`` None: the value is accepted."""
    from localllm_convert.archs.base import converter_for

    class AnyWriter:   # accepts every add_* call
        def __getattr__(self, name):
            return lambda *a, **k: None

    def convert_readers():
        conv = converter_for(Checkpoint(_checkpoint(tmp_path, config, tokenizer, **extra)))
        conv.vocab()
        conv.write_metadata(AnyWriter())
    if needle is None:
        convert_readers()
    else:
        with pytest.raises(ValueError, match=needle):
            convert_readers()
