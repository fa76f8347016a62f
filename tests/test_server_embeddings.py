"""`localllm serve` with an embedding model and a reranker (tiny random BERTs converted by our
converter), driven by the real `openai` client's embeddings.create and by HTTP for /v1/rerank;
every answer equals LLM.embed / LLM.rerank in-process, and transformers' classifier logits; many
one-text requests at once each get their own vector. Also `localllm embed` (the CLI) and a chat
model's server answering embeddings with a 400."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import numpy as np
import openai
import pytest

from conftest import model_file, package_env
from embed_models import TEXTS, build_bert, build_reranker, cosines, hf_embeddings, hf_rerank_logits
from localllm import LLM
from localllm_convert import convert
from serving import LiveServer


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    hf = build_bert(tmp_path_factory.mktemp("bert"))
    out = tmp_path_factory.mktemp("gguf") / "bert-f32.gguf"
    convert(hf, out, type="f32", progress=False)
    return hf, out


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    hf = build_reranker(tmp_path_factory.mktemp("reranker"))
    out = tmp_path_factory.mktemp("gguf") / "reranker-f32.gguf"
    convert(hf, out, type="f32", progress=False)
    return hf, out


def test_openai_embeddings_create(bert):
    hf, gguf = bert
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    with LiveServer(gguf, "-c", "512") as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
        got = client.embeddings.create(model=gguf.stem, input=TEXTS)           # the client asks for base64
        vectors = np.array([d.embedding for d in got.data], np.float32)
        assert [d.index for d in got.data] == list(range(len(TEXTS)))
        np.testing.assert_allclose(vectors, llm.embed(TEXTS), atol=1e-6)
        assert cosines(vectors, hf_embeddings(hf, TEXTS)).min() >= 0.9999
        n_tokens = sum(len(llm.tokenize(t)) for t in TEXTS)
        assert got.usage.prompt_tokens == got.usage.total_tokens == n_tokens
        one = client.embeddings.create(model=gguf.stem, input=TEXTS[1], encoding_format="float", dimensions=8)
        np.testing.assert_allclose(one.data[0].embedding, llm.embed([TEXTS[1]], dimensions=8)[0], atol=1e-6)
        ids = client.embeddings.create(model=gguf.stem, input=[llm.tokenize(TEXTS[0]), llm.tokenize(TEXTS[2])])
        np.testing.assert_allclose([d.embedding for d in ids.data], llm.embed([TEXTS[0], TEXTS[2]]), atol=1e-6)
        with pytest.raises(openai.BadRequestError, match="more than the 128 this model takes"):
            client.embeddings.create(model=gguf.stem, input="word " * 200)
        r = httpx.post(f"{srv.url}/v1/embeddings", json={"input": "word " * 200, "truncate": True}, timeout=60)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 64
        with pytest.raises(openai.BadRequestError, match="encoder-only"):
            client.completions.create(model=gguf.stem, prompt="hello", max_tokens=2)
        r = httpx.post(f"{srv.url}/v1/rerank", json={"query": "q", "documents": ["d"]}, timeout=60)
        assert r.status_code == 400 and "not a reranker" in r.json()["error"]["message"]
        for bad, what in (({"input": []}, "input is empty"), ({"input": [1, "a"]}, "input"),
                          ({"input": "x", "dimensions": 0}, "dimensions"), ({"input": "x", "dimensions": 65}, "65"),
                          ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                          ({"input": [[1, 10**7]]}, "out of range"), ({"input": ["x"] * 2049}, "at most 2048")):
            r = httpx.post(f"{srv.url}/v1/embeddings", json=bad, timeout=60)
            assert r.status_code == 400 and what in r.text, (bad, r.text)
        assert httpx.get(f"{srv.url}/health").status_code == 200        # still serving


def test_concurrent_one_text_requests_each_get_their_vector(bert):
    """Many one-text requests at once (their jobs share the engine's steps): each answer is
    LLM.embed of its own text, whatever else rides in the step, bad requests among them included;
    the float numbers are float32 values written exactly (as json.dumps of tolist writes them)."""
    _, gguf = bert
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    texts = [f"{TEXTS[i % len(TEXTS)]} {i}" for i in range(48)]
    want = llm.embed(texts)

    async def ask_all(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:
            calls = [client.post(f"{url}/v1/embeddings", json={"input": t, "encoding_format": "float"}) for t in texts]
            calls += [client.post(f"{url}/v1/embeddings", json={"input": "word " * 200}) for _ in range(4)]
            return await asyncio.gather(*calls)

    with LiveServer(gguf, "-c", "512") as srv:
        for _ in range(2):
            answers = asyncio.run(ask_all(srv.url))
            for text, r, row in zip(texts, answers, want):
                assert r.status_code == 200, r.text
                got = r.json()["data"][0]["embedding"]
                np.testing.assert_allclose(got, row, atol=1e-6, err_msg=text)
                wide = np.array(got, np.float64)
                assert (wide.astype(np.float32).astype(np.float64) == wide).all()
            for r in answers[len(texts):]:
                assert r.status_code == 400 and "more than the 128 this model takes" in r.json()["error"]["message"]


def test_rerank_over_http(reranker):
    hf, gguf = reranker
    query = "what is the capital of japan?"
    ref = hf_rerank_logits(hf, query, TEXTS)
    with LiveServer(gguf, "-c", "512") as srv:
        body = {"query": query, "documents": TEXTS, "top_n": 3}
        r = httpx.post(f"{srv.url}/v1/rerank", json=body, timeout=60).json()
        assert [x["index"] for x in r["results"]] == list(np.argsort(-ref, kind="stable")[:3])
        for x in r["results"]:
            assert abs(x["relevance_score"] - ref[x["index"]]) < 1e-3
            assert x["document"] == {"text": TEXTS[x["index"]]}
        assert r["usage"]["total_tokens"] > 0
        cohere = {"query": query, "documents": [{"text": t} for t in TEXTS], "return_documents": False}
        r2 = httpx.post(f"{srv.url}/rerank", json=cohere, timeout=60).json()
        assert len(r2["results"]) == len(TEXTS) and "document" not in r2["results"][0]
        for x in r2["results"]:
            assert abs(x["relevance_score"] - ref[x["index"]]) < 1e-3


def test_chat_model_refuses_embeddings():
    with LiveServer(model_file("smollm2-135m-q4_1"), "-c", "512") as srv:
        r = httpx.post(f"{srv.url}/v1/embeddings", json={"input": "hello"}, timeout=60)
        assert r.status_code == 400 and "no pooling" in r.json()["error"]["message"]


def test_cli_embed_prints_json(bert):
    _, gguf = bert
    out = subprocess.run([sys.executable, "-m", "localllm_cli", "embed", "-m", str(gguf), "-t", "2",
                          TEXTS[0], TEXTS[1]], env=package_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    llm = LLM(str(gguf), n_threads=2)
    np.testing.assert_allclose([r["embedding"] for r in rows], llm.embed(TEXTS[:2]), atol=1e-6)
    assert [r["text"] for r in rows] == TEXTS[:2]


def test_cli_embed_query_reranks(reranker):
    hf, gguf = reranker
    query = "what is the capital of japan?"
    out = subprocess.run([sys.executable, "-m", "localllm_cli", "embed", "-m", str(gguf), "-t", "2", "--query", query,
                          *TEXTS[:4]], env=package_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)["results"]
    ref = hf_rerank_logits(hf, query, TEXTS[:4])
    assert [r["index"] for r in results] == list(np.argsort(-ref, kind="stable"))
    bad = subprocess.run([sys.executable, "-m", "localllm_cli", "embed", "-m", str(gguf), "-t", "2", "x"],
                         env=package_env(), capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "reranker" in bad.stderr
