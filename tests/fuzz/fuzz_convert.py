"""Fuzz the converter's readers: config.json, tokenizer.json and a safetensors header from the
input, read as `localllm convert` reads a checkpoint (Checkpoint, converter_for, the vocabulary,
the metadata plan). Expected: CheckpointError / VocabError (ValueErrors naming the file);
anything else is a finding."""
from __future__ import annotations

import json
import os
import struct

import atheris

import harness

with atheris.instrument_imports(include=harness.INSTRUMENTED):
    from localllm_convert.archs.base import converter_for
    from localllm_convert.checkpoint import Checkpoint
    from localllm_convert.vocab import load_vocab

DIR = harness.scratch_file("convert")
os.makedirs(DIR, exist_ok=True)
SEP = b"\n--8<--\n"


def safetensors(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def seeds():
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "vocab_size": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
              "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}}
    tokenizer = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3}, "merges": ["a b"]},
                 "added_tokens": [{"id": 3, "content": "<s>", "special": True, "single_word": False,
                                   "lstrip": False, "rstrip": False, "normalized": False}],
                 # valid for the tokenizers library, so the special-token readers after it run
                 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                   "use_regex": True},
                 "post_processor": {"type": "TemplateProcessing", "single": [
                     {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                     "pair": [],
                     "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}}}
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [4, 32],
                                                       "data_offsets": [0, 512]}}).encode()
    yield json.dumps(config).encode() + SEP + json.dumps(tokenizer).encode() + SEP + header
    yield b"[1, 2]" + SEP + b"{}" + SEP + b"{}"
    yield b'{"architectures": ["Gemma3ForCausalLM"], "rope_scaling": {"rope_type": "linear"}}' + SEP + b"null" + SEP + b"[]"


def test_one_input(data: bytes) -> None:
    parts = data.split(SEP, 2) + [b"", b""]
    config, tokenizer, header = parts[:3]
    with open(os.path.join(DIR, "config.json"), "wb") as f:
        f.write(config)
    with open(os.path.join(DIR, "tokenizer.json"), "wb") as f:
        f.write(tokenizer)
    with open(os.path.join(DIR, "model.safetensors"), "wb") as f:
        f.write(safetensors(header, b"\0" * 512))
    try:
        ckpt = Checkpoint(DIR)
        harness.feedback("checkpoint", len(ckpt.tensors))
        conv = converter_for(ckpt)
        harness.feedback("converter", type(conv).__name__)
        vocab = load_vocab(ckpt, None)
        harness.feedback("vocab", len(vocab.tokens) > 0)
    except ValueError as e:
        harness.feedback(type(e).__name__, str(e)[:80])


if __name__ == "__main__":
    harness.run("convert", seeds, test_one_input)
