"""`localllm info`: summary and tensor listing checked against gguf-py's reading of the file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf as ggufpy
import pytest

from conftest import model_file

SMOLLM = "smollm2-135m-q4_1"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The command as installed (or as the test run's PYTHONPATH provides it)."""
    return subprocess.run([sys.executable, "-m", "localllm_cli", "info", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def reference() -> ggufpy.GGUFReader:
    return ggufpy.GGUFReader(model_file(SMOLLM))


def field(reader: ggufpy.GGUFReader, key: str):
    return reader.fields[key].contents()


def test_info_json_matches_gguf_py(reference):
    out = run_cli(str(model_file(SMOLLM)), "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    arch = field(reference, "general.architecture")
    assert s["architecture"] == arch
    assert s["name"] == field(reference, "general.name")
    assert s["n_layers"] == field(reference, f"{arch}.block_count")
    assert s["n_embd"] == field(reference, f"{arch}.embedding_length")
    assert s["n_ff"] == field(reference, f"{arch}.feed_forward_length")
    assert s["n_head"] == field(reference, f"{arch}.attention.head_count")
    assert s["n_head_kv"] == field(reference, f"{arch}.attention.head_count_kv")
    assert s["context_length"] == field(reference, f"{arch}.context_length")
    assert s["rope_freq_base"] == field(reference, f"{arch}.rope.freq_base")
    assert s["vocab_size"] == len(field(reference, "tokenizer.ggml.tokens"))
    assert s["tokenizer_model"] == field(reference, "tokenizer.ggml.model")
    assert s["tokenizer_pre"] == field(reference, "tokenizer.ggml.pre")
    assert s["has_chat_template"] == ("tokenizer.chat_template" in reference.fields)
    assert s["file_type"] == field(reference, "general.file_type")
    assert s["n_params"] == sum(int(t.n_elements) for t in reference.tensors)
    assert s["n_tensors"] == len(reference.tensors)
    assert s["file_size"] == os.path.getsize(model_file(SMOLLM))
    histogram: dict[str, dict[str, int]] = {}
    for t in reference.tensors:
        h = histogram.setdefault(t.tensor_type.name, {"count": 0, "bytes": 0})
        h["count"] += 1
        h["bytes"] += int(t.n_bytes)
    assert s["tensor_types"] == histogram
    assert "tensors" not in s


def test_info_tensors_lists_every_tensor(reference):
    out = run_cli(str(model_file(SMOLLM)), "--json", "--tensors")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["tensors"]
    assert [(r["name"], r["type"], r["shape"], r["offset"]) for r in rows] == [
        (t.name, t.tensor_type.name, t.shape.tolist(), int(t.data_offset)) for t in reference.tensors]

    text = run_cli(str(model_file(SMOLLM)), "--tensors")
    assert text.returncode == 0, text.stderr
    listed = {line.split()[0]: line.split() for line in text.stdout.splitlines() if line.strip()}
    for t in reference.tensors:
        name, ttype, shape, offset = listed[t.name]
        assert (ttype, shape, int(offset)) == (
            t.tensor_type.name, "x".join(str(d) for d in t.shape.tolist()), int(t.data_offset))


def test_info_text_by_known_name(reference):
    out = run_cli(SMOLLM)
    assert out.returncode == 0, out.stderr
    arch = field(reference, "general.architecture")
    rows = {line[:16].strip(): line[16:].strip() for line in out.stdout.splitlines()}  # label, value
    assert rows["architecture"] == arch
    assert rows["layers"] == str(field(reference, f"{arch}.block_count"))
    assert rows["context length"] == str(field(reference, f"{arch}.context_length"))


def test_info_rejects_a_non_gguf_file(tmp_path: Path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("this is not a model\n")
    out = run_cli(str(bogus))
    assert out.returncode == 1
    assert "GGUF" in out.stderr and "magic" in out.stderr
    assert "Traceback" not in out.stderr


def test_info_missing_file(tmp_path: Path):
    out = run_cli(str(tmp_path / "absent.gguf"))
    assert out.returncode == 1
    assert "absent.gguf" in out.stderr and "Traceback" not in out.stderr
