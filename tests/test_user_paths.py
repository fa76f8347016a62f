"""What users touch, end to end, against llama.cpp's own outputs (tests/data/reference):
chat (LLM.chat, `run --chat`, the interactive `chat`), stop strings through generate and the
batched engine, and the `bench` and `perplexity` commands.

Exact comparisons use numerics="llama.cpp", whose logits are llama.cpp's bit for bit
(test_fidelity.py), so greedy text must equal llama.cpp's greedy text token for token."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import CORPUS, f16_perplexity_rows, greedy_rows, llm_for, model_file

CHAT_MODELS = ["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m"]     # the two with a chat template


def chat_row(model: str) -> dict:
    return next(r for r in greedy_rows(model) if "chat" in r["prompt"])


def localllm(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "localllm_cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"localllm {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
    return proc


def expected_reply(row: dict, llm) -> str:
    """llama.cpp's greedy reply, without the end-of-turn token it sampled last."""
    ids = [t for t in row["greedy_ids"] if t not in llm.tokenizer.eot_ids]
    return llm.detokenize(ids)


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_llm_chat_replies_as_llamacpp(model):
    llm = llm_for(model, numerics="llama.cpp")
    row = chat_row(model)
    res = llm.chat(row["prompt"]["chat"], max_tokens=len(row["greedy_ids"]), temperature=0)
    assert res.prompt_token_ids == row["prompt_ids"]
    ended = [t for t in row["greedy_ids"] if t not in llm.tokenizer.eot_ids]
    assert res.token_ids[:len(ended)] == ended
    assert res.text == expected_reply(row, llm)
    assert res.finish_reason == ("stop" if len(ended) < len(row["greedy_ids"]) else "length")


@pytest.mark.parametrize("model", CHAT_MODELS)
def test_run_chat_prints_llamacpps_reply(model):
    row = chat_row(model)
    (message,) = row["prompt"]["chat"]
    proc = localllm("run", "-m", str(model_file(model)), "--chat", "-p", message["content"],
                    "-n", str(len(row["greedy_ids"])), "--temp", "0", "--numerics", "llama.cpp")
    assert proc.stdout.rstrip("\n") == expected_reply(row, llm_for(model, numerics="llama.cpp")).rstrip("\n")


def test_interactive_chat_two_turns_and_reset():
    """`localllm chat` on a pipe: the first reply is llama.cpp's; a second turn sees the first
    (its prompt holds the history); after /reset the same question gets the first reply again."""
    model = "qwen2.5-coder-0.5b-q4_k_m"
    row = chat_row(model)
    question = row["prompt"]["chat"][0]["content"]
    n = str(len(row["greedy_ids"]))
    stdin = f"{question}\nAnd in French?\n/reset\n{question}\n/exit\n"
    proc = localllm("chat", "-m", str(model_file(model)), "-n", n, "--temp", "0", "--numerics", "llama.cpp",
                    stdin=stdin)
    replies = proc.stdout.split("\n")
    want = expected_reply(row, llm_for(model, numerics="llama.cpp"))
    assert proc.stdout.startswith(want)
    assert proc.stdout.count(want) == 2, proc.stdout           # first turn, and again after /reset
    assert len([r for r in replies if r.strip()]) >= 3


def test_stop_strings_through_generate_and_the_engine():
    """llama.cpp's greedy continuation of "The capital of France is" on SmolLM2 is " Paris.\\n\\nThe
    United States ...": a stop at "\\n" ends it at " Paris." (finish_reason stop), alone and
    among other requests in the batched engine; the stop text itself is not returned."""
    model = "smollm2-135m-q4_1"
    llm = llm_for(model, numerics="llama.cpp")
    row = next(r for r in greedy_rows(model) if r["prompt"]["name"] == "france")
    full = row["greedy_text"]
    cut = full.index("\n")
    alone = llm.generate(row["prompt_ids"], max_tokens=48, temperature=0, stop=["\n"])
    assert alone.text == full[:cut] == " Paris." and alone.finish_reason == "stop"
    two_word = llm.generate(row["prompt_ids"], max_tokens=48, temperature=0, stop=["United States"])
    assert two_word.text == full[:full.index("United States")]
    others = [r["prompt_ids"] for r in greedy_rows(model) if r["prompt"]["name"] != "france"]
    batch = llm.generate([row["prompt_ids"], *others], max_tokens=48, temperature=0, stop=["\n"])
    assert batch[0].text == " Paris." and batch[0].finish_reason == "stop"
    for res, r in zip(batch[1:], [r for r in greedy_rows(model) if r["prompt"]["name"] != "france"]):
        if "\n" in r["greedy_text"]:
            assert res.text == r["greedy_text"][:r["greedy_text"].index("\n")]


def test_perplexity_command_matches_llamacpp():
    model = "smollm2-135m-q4_1"
    ref = next(r for r in f16_perplexity_rows() if r["model"] == model and r["n_ctx"] == 512)
    proc = localllm("perplexity", "-m", str(model_file(model)), "-f", str(CORPUS), "-c", "512")
    ppl = float(re.search(r"PPL = ([0-9.]+)", proc.stdout).group(1))
    assert abs(ppl / ref["ppl"] - 1) <= 0.005, f"{ppl} vs llama.cpp's {ref['ppl']}"
    assert f"chunks {ref['chunks']}," in proc.stderr


def test_bench_command_reports_both_tests():
    """`localllm bench --json`: llama-bench's fields for pp and tg, with token counts as asked and
    rates that agree with the times they came from."""
    proc = localllm("bench", "-m", str(model_file("smollm2-135m-q4_1")), "-p", "64", "-n", "16", "-r", "2",
                    "-t", "2", "--json")
    rows = json.loads(proc.stdout)
    tests = {(r["n_prompt"], r["n_gen"]): r for r in rows}
    assert set(tests) == {(64, 0), (0, 16)}
    for (n_prompt, n_gen), r in tests.items():
        n = n_prompt + n_gen
        assert len(r["samples_ns"]) == 2 and r["n_threads"] == 2
        assert r["avg_ts"] == pytest.approx(sum(n * 1e9 / s for s in r["samples_ns"]) / 2, rel=1e-3)
