"""The `localllm` command as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import model_file, read_jsonl, REFERENCE


def localllm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "localllm_cli", *args], capture_output=True,
                          text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"localllm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def test_run_default_model_capital_of_france():
    model_file("smollm2-135m-q4_1")          # the default model, pulled on first use
    proc = localllm("run", "-p", "The capital of France is", "-n", "20", "--temp", "0")
    assert proc.stdout.startswith(" Paris."), proc.stdout
    assert "t/s" in proc.stderr and "load" in proc.stderr


def test_run_reads_prompt_file(tmp_path):
    f = tmp_path / "prompt.txt"
    f.write_text("The capital of France is", encoding="utf-8")
    proc = localllm("run", "-m", str(model_file("smollm2-135m-q4_1")), "-f", str(f), "-n", "4", "--temp", "0")
    assert proc.stdout.startswith(" Paris")


def test_tokenize_prints_llamacpp_ids():
    rows = [r for r in read_jsonl(REFERENCE / "tokenize.jsonl")
            if r["model"] == "qwen2.5-coder-0.5b-q4_k_m" and r["text"] and not r["parse_special"]]
    row = rows[len(rows) // 2]
    args = ["tokenize", "-m", str(model_file(row["model"])), row["text"]]
    if not row["add_special"]:
        args.append("--no-special")
    assert json.loads(localllm(*args).stdout) == row["ids"]


def test_missing_model_file_is_a_clear_error(tmp_path):
    proc = localllm("run", "-m", str(tmp_path / "nope.gguf"), "-p", "hi", check=False)
    assert proc.returncode == 1
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr


def test_not_a_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 10)
    proc = localllm("run", "-m", str(bad), "-p", "hi", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "magic" in proc.stderr.lower() or "gguf" in proc.stderr.lower()


def test_invalid_sampling_value_is_a_clear_error():
    proc = localllm("run", "-m", str(model_file("smollm2-135m-q4_1")), "-p", "hi", "--top-p", "1.5",
                    check=False)
    assert proc.returncode == 1 and "top_p" in proc.stderr and "Traceback" not in proc.stderr


def test_prompt_file_reads_are_bounded():
    """`-f /dev/zero` is refused after MAX_TEXT_FILE_BYTES, with the file named (it once read
    until MemoryError)."""
    for cmd in (["run", "-f", "/dev/zero"], ["perplexity", "-f", "/dev/zero"]):
        proc = localllm(*cmd, "-m", str(model_file("smollm2-135m-q4_1")), check=False)
        assert proc.returncode != 0
        assert "/dev/zero: more than 256 MiB; text files are read whole" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_prompt_file_not_utf8(tmp_path):
    f = tmp_path / "prompt.bin"
    f.write_bytes(b"Hello \xff\xfe world")
    proc = localllm("run", "-m", str(model_file("smollm2-135m-q4_1")), "-f", str(f), check=False)
    assert proc.returncode != 0 and "not UTF-8 text (byte 6" in proc.stderr, proc.stderr


def test_quantized_kv_cache_flags():
    """llama.cpp's -ctk / -ctv on run, info --plan (the KV bytes follow the type) and bench."""
    model = str(model_file("smollm2-135m-q4_1"))
    proc = localllm("run", "-m", model, "-p", "The capital of France is", "-n", "4", "--temp", "0",
                    "-ctk", "q8_0", "-ctv", "q8_0")
    assert proc.stdout.startswith(" Paris"), proc.stdout
    kv = {}
    for t in ("f16", "q8_0", "q4_0"):
        plan = json.loads(localllm("info", model, "--plan", "--json", "-ngl", "0", "-c", "1024",
                                   "--cache-type-k", t, "--cache-type-v", t).stdout)
        kv[t] = plan["devices"]["CPU"]["kv"]
    assert kv["q8_0"] * 64 == kv["f16"] * 34 and kv["q4_0"] * 64 == kv["f16"] * 18
    rows = json.loads(localllm("bench", "-m", model, "-p", "16", "-n", "4", "-r", "1", "--json",
                               "-ctk", "q4_0", "-ctv", "q8_0").stdout)
    assert {(r["type_k"], r["type_v"]) for r in rows} == {("q4_0", "q8_0")}
    bad = localllm("run", "-m", model, "-p", "x", "-ctk", "q5_1", check=False)
    assert bad.returncode != 0 and "q5_1" in bad.stderr
