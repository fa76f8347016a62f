"""Speculative decoding where users reach it: `LLM(speculative=..., draft_model=...)` with
generate / stream / chat, `localllm run --spec ngram / -md FILE`, and `localllm serve` with the
same flags. Greedy output must equal plain decoding's; draft/accept counters are reported."""
from __future__ import annotations


import httpx
import pytest

from conftest import greedy_rows, model_file
from derived_models import derived_model
from localllm import LLM, SpecConfig
from serving import LiveServer
from test_cli import localllm

KEY = "smollm2-135m-q4_1"
GREEDY = dict(temperature=0.0, max_tokens=40, ignore_eos=True)


@pytest.fixture(scope="module")
def plain_llm():
    return LLM(str(model_file(KEY)), n_ctx=1024, n_threads=2)


def test_llm_generate_stream_chat_with_ngram_and_draft(plain_llm):
    prompts = [r["rendered_prompt"] for r in greedy_rows(KEY)][:3]
    messages = [{"role": "user", "content": "List the days of the week, then list them again."}]
    want = [plain_llm.generate(p, **GREEDY).token_ids for p in prompts]
    want_chat = plain_llm.chat(messages, **GREEDY).token_ids
    for spec in (dict(speculative="ngram"),
                 dict(draft_model=str(derived_model(KEY, "q4_0"))),
                 dict(speculative=SpecConfig(mode="ngram", draft_max=4, ngram_min=1, ngram_max=2))):
        llm = LLM(str(model_file(KEY)), n_ctx=1024, n_threads=2, **spec)
        results = llm.generate(prompts, **GREEDY)
        assert [r.token_ids for r in results] == want, spec
        assert sum(r.timings.draft_tokens for r in results) > 0
        assert all(r.timings.accepted_tokens <= r.timings.draft_tokens for r in results)
        stream = llm.stream(prompts[0], **GREEDY)
        "".join(stream)
        assert stream.token_ids == want[0]
        assert llm.chat(messages, **GREEDY).token_ids == want_chat
        sampled = llm.generate(prompts[0], temperature=0.8, seed=3, max_tokens=24, ignore_eos=True)
        assert len(sampled.token_ids) == 24 and llm.engine.pool.num_used == 0
        assert llm.engine.stats.spec_accepted > 0


def test_llm_refuses_bad_speculative_settings(tmp_path):
    qwen = str(model_file("qwen2.5-coder-0.5b-q4_k_m"))
    with pytest.raises(ValueError, match="vocabular"):
        LLM(str(model_file(KEY)), n_ctx=256, draft_model=qwen)
    with pytest.raises(FileNotFoundError, match="draft model"):
        LLM(str(model_file(KEY)), n_ctx=256, draft_model=str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="speculative mode"):
        LLM(str(model_file(KEY)), n_ctx=256, speculative="medusa")
    with pytest.raises(ValueError, match="draft_min"):
        LLM(str(model_file(KEY)), n_ctx=256, speculative=SpecConfig(draft_max=4, draft_min=5))


def test_cli_run_spec_flags():
    model = str(model_file(KEY))
    args = ["run", "-m", model, "-c", "512", "-t", "2", "-p", "One, two, three, four, five, one, two, three,",
            "-n", "32", "--temp", "0"]
    plain = localllm(*args)
    ngram = localllm(*args, "--spec", "ngram", "--draft-max", "8")
    draft = localllm(*args, "-md", str(derived_model(KEY, "q4_0")), "--draft-p-min", "0.5")
    assert ngram.stdout == plain.stdout and draft.stdout == plain.stdout
    assert "accepted" in ngram.stderr and "accepted" in draft.stderr
    both = localllm(*args, "--spec", "ngram", "-md", model, check=False)
    assert both.returncode != 0 and "choose one" in both.stderr
    bad = localllm(*args, "-md", str(model_file("gemma3-270m-q4_k_m")), check=False)
    assert bad.returncode != 0 and "vocabular" in bad.stderr and "Traceback" not in bad.stderr


def test_serve_with_ngram_lookup(plain_llm):
    prompt = "One, two, three, four, five, one, two, three,"
    want = plain_llm.generate(prompt, temperature=0.0, max_tokens=24).text
    with LiveServer(model_file(KEY), "-c", "1024", "--parallel", "2", "--spec", "ngram") as srv:
        r = httpx.post(f"{srv.url}/v1/completions", json={"prompt": prompt, "max_tokens": 24, "temperature": 0},
                       timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
        metrics = httpx.get(f"{srv.url}/metrics", timeout=30).text
        drafted = [line for line in metrics.splitlines() if line.startswith("localllm_spec_drafted_tokens")]
        assert drafted and float(drafted[0].split()[-1]) > 0, metrics[-800:]
