"""Embeddings and reranking (localllm.embed, LLM.embed / LLM.rerank) against transformers:
tiny random BERTs converted by our converter (F32, F16 and Q8_0), batches mixing lengths, pooling as
sentence-transformers does it; a cross-encoder's scores against its classifier's logits; the real
all-MiniLM-L6-v2 against transformers; the errors a user meets."""
from __future__ import annotations

import numpy as np
import pytest

from embed_models import (TEXTS, build_bert, build_nomic, build_qwen3_embedder, build_reranker, cosines,
                          hf_embeddings, hf_last_token, hf_rerank_logits, hf_tokenizer, minilm_dir)
from localllm import LLM
from localllm_convert import convert

_CACHE: dict = {}


def _converted(tmp_path_factory, name: str, type_: str):
    key = (name, type_)
    if key not in _CACHE:
        if name not in _CACHE:
            base = tmp_path_factory.mktemp(name)
            _CACHE[name] = {"bert": build_bert, "reranker": build_reranker, "nomic": build_nomic,
                            "cased": lambda out: build_bert(out, cased=True),
                            "qwen3": build_qwen3_embedder,
                            "minilm": lambda _: minilm_dir()}[name](base)
        out = tmp_path_factory.mktemp("gguf") / f"{name}-{type_}.gguf"
        convert(_CACHE[name], out, type=type_, progress=False)
        _CACHE[key] = out
    return _CACHE[name], _CACHE[key]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return lambda type_: _converted(tmp_path_factory, "bert", type_)


@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory):
    return _converted(tmp_path_factory, "reranker", "f32")


@pytest.mark.parametrize("type_, floor", [("f32", 0.9999), ("f16", 0.9999), ("q8_0", 0.999)])
def test_tiny_bert_mean_pooling_matches_transformers(tiny_bert, type_, floor):
    hf_dir, gguf = tiny_bert(type_)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.embedder.pooling == "mean"          # from modules.json via bert.pooling_type
    ours = llm.embed(TEXTS)
    ref = hf_embeddings(hf_dir, TEXTS, "mean")
    assert ours.shape == (len(TEXTS), 64) and ours.dtype == np.float32
    assert cosines(ours, ref).min() >= floor
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


def test_tiny_bert_cls_pooling_and_packing(tiny_bert):
    hf_dir, gguf = tiny_bert("f32")
    llm = LLM(str(gguf), n_threads=2, n_ctx=512, n_batch=64)   # several forwards, long text alone
    ours = llm.embed(TEXTS, pooling="cls")
    assert cosines(ours, hf_embeddings(hf_dir, TEXTS, "cls")).min() >= 0.9999
    one_by_one = np.concatenate([llm.embed([t], pooling="cls") for t in TEXTS])
    assert cosines(ours, one_by_one).min() >= 0.99999   # a text's vector does not depend on its batch


@pytest.mark.parametrize("type_", ["f16", "q8_0"])
def test_vectors_do_not_depend_on_the_batch(tiny_bert, type_):
    """The same bits for a text alone (3 to ~90 tokens) and in a batch of them: F16 runs q/k/v
    in one parallel region with their biases added inside it (matmul_q_group), Q8_0 its
    block-sequential kernels."""
    _, gguf = tiny_bert(type_)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    alone = np.concatenate([llm.embed([t]) for t in TEXTS])
    assert np.array_equal(llm.embed(TEXTS), alone)


def test_wordpiece_tokens_equal_transformers(tiny_bert):
    hf_dir, gguf = tiny_bert("f32")
    llm = LLM(str(gguf), n_threads=1, n_ctx=512)
    tok = hf_tokenizer(hf_dir)
    for text in TEXTS + ["", "  spaced\tout\nlines  ", "UPPER lower MiXeD", "emoji 🙂 and ümlaut"]:
        assert llm.tokenize(text) == tok(text)["input_ids"], text


def test_cased_wordpiece_tokens_equal_transformers(tmp_path_factory):
    hf_dir, gguf = _converted(tmp_path_factory, "cased", "f32")
    llm = LLM(str(gguf), n_threads=1, n_ctx=512)
    tok = hf_tokenizer(hf_dir)
    for text in TEXTS + ["UPPER lower MiXeD", "Crème Brûlée"]:
        assert llm.tokenize(text) == tok(text)["input_ids"], text
    assert llm.tokenize("Hello") != llm.tokenize("hello")


def test_dimensions_normalize_and_token_ids(tiny_bert):
    _, gguf = tiny_bert("f32")
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    full = llm.embed(TEXTS[:3], normalize=False)
    short = llm.embed(TEXTS[:3], dimensions=16)
    expect = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(short, expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(llm.embed([llm.tokenize(TEXTS[1])]), llm.embed([TEXTS[1]]), rtol=1e-6)
    assert llm.embed("one string").shape == (1, 64)


def test_errors_name_the_problem(tiny_bert):
    _, gguf = tiny_bert("f32")
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    long_text = "word " * 200                    # > the 128 positions the model has
    with pytest.raises(ValueError, match="more than the 128 this model takes"):
        llm.embed([long_text])
    vec = llm.embed([long_text], truncate=True)
    assert vec.shape == (1, 64) and np.isfinite(vec).all()
    with pytest.raises(ValueError, match="no pooling"):
        llm.embed(["x"], pooling="none")
    with pytest.raises(ValueError, match="dimensions must be in"):
        llm.embed(["x"], dimensions=65)
    with pytest.raises(ValueError, match="encoder-only model"):
        llm.generate("hello", max_tokens=2)
    with pytest.raises(ValueError, match="not a reranker"):
        llm.rerank("q", ["d"])


def test_rerank_scores_equal_classifier_logits(tiny_reranker):
    hf_dir, gguf = tiny_reranker
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.embedder.pooling == "rank"
    query = "what is the capital of japan?"
    ref = hf_rerank_logits(hf_dir, query, TEXTS)
    ranked = llm.rerank(query, TEXTS)
    scores = np.empty(len(TEXTS))
    for r in ranked:
        scores[r["index"]] = r["relevance_score"]
        assert r["document"] == TEXTS[r["index"]]
    np.testing.assert_allclose(scores, ref, atol=1e-3)
    assert [r["index"] for r in ranked] == list(np.argsort(-ref, kind="stable"))
    assert [r["index"] for r in llm.rerank(query, TEXTS, top_n=2)] == [r["index"] for r in ranked[:2]]
    with pytest.raises(ValueError, match="reranker"):
        llm.embed(["x"])


@pytest.mark.parametrize("type_, floor", [("f32", 0.9999), ("f16", 0.9999), ("q8_0", 0.999)])
def test_real_minilm_matches_sentence_transformers(tmp_path_factory, type_, floor):
    from sentence_transformers import SentenceTransformer
    hf_dir, gguf = _converted(tmp_path_factory, "minilm", type_)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.embedder.pooling == "mean"
    # The keys llama.cpp's loader requires of a bert file, as its converter writes them.
    assert llm.gguf.metadata["tokenizer.ggml.token_type_count"] == 2
    ours = llm.embed(TEXTS)
    ref = SentenceTransformer(str(hf_dir), device="cpu").encode(TEXTS, normalize_embeddings=True)
    assert cosines(ours, ref).min() >= floor
    assert cosines(ours, hf_embeddings(hf_dir, TEXTS, "mean")).min() >= floor
    # Meaning, not only numbers: the paraphrase is nearer than the unrelated sentence.
    a, b, c = llm.embed(["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell."])
    assert a @ b > a @ c + 0.2


@pytest.mark.parametrize("type_, floor", [("f32", 0.9999), ("q8_0", 0.999)])
def test_tiny_nomic_bert_matches_transformers(tmp_path_factory, type_, floor):
    hf_dir, gguf = _converted(tmp_path_factory, "nomic", type_)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.hparams["arch"] == "nomic-bert" and llm.embedder.pooling == "mean"
    assert cosines(llm.embed(TEXTS), hf_embeddings(hf_dir, TEXTS, "mean")).min() >= floor


@pytest.mark.parametrize("type_, floor", [("f32", 0.9999), ("q8_0", 0.999)])
def test_qwen3_last_token_pooling_matches_transformers(tmp_path_factory, type_, floor):
    hf_dir, gguf = _converted(tmp_path_factory, "qwen3", type_)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.embedder.pooling == "last"               # a decoder embedder (Qwen3-Embedding's layout)
    ids = [llm.tokenize(t) for t in TEXTS]
    assert cosines(llm.embed(ids), hf_last_token(hf_dir, ids)).min() >= floor


def test_embeddings_ride_beside_generation_unchanged():
    """A decoder serving both: embeddings computed in the same forwards as a greedy generation
    equal those computed alone, and the generated text equals the text generated alone."""
    import threading

    from conftest import model_file
    llm = LLM(str(model_file("smollm2-135m-q4_1")), n_threads=2, n_ctx=1024)
    alone_vectors = llm.embed(TEXTS, pooling="mean")
    alone_text = llm.generate("Write about rivers.", max_tokens=48, temperature=0).text
    steps_before = llm.engine.stats.steps
    got: dict = {}
    gen = threading.Thread(target=lambda: got.update(
        text=llm.generate("Write about rivers.", max_tokens=48, temperature=0).text))
    gen.start()
    vectors = [llm.embed([t], pooling="mean")[0] for t in TEXTS * 3]
    gen.join()
    assert got["text"] == alone_text
    np.testing.assert_allclose(np.array(vectors[:len(TEXTS)]), alone_vectors, rtol=1e-5, atol=1e-6)
    assert llm.engine.stats.steps - steps_before < 48 + 3 * len(TEXTS)    # some forwards carried both


def test_bad_calls_into_the_encoder_are_clear_errors(tiny_bert):
    """The native entry points refuse what would index out of bounds, naming the problem."""
    _, gguf = tiny_bert("f32")
    llm = LLM(str(gguf), n_threads=1, n_ctx=512)
    model, table = llm._model, np.array([[1, 2]], np.int32)
    ids = np.array([101, 7592, 102], np.int32)
    with pytest.raises(ValueError, match="each sequence must be given whole"):
        model.forward_hidden(ids, np.array([3, 4, 5], np.int32), np.zeros(3, np.int32), table,
                             np.array([0], np.int32))
    with pytest.raises(ValueError, match="token type 7 out of range"):
        model.forward_hidden(ids, np.arange(3, dtype=np.int32), np.zeros(3, np.int32), table,
                             np.array([0], np.int32), np.array([0, 7, 0], np.int32))
    with pytest.raises(ValueError, match="encoder-only"):
        model.forward(ids, np.arange(3, dtype=np.int32), np.zeros(3, np.int32), table, np.array([2], np.int32))
    with pytest.raises(ValueError, match="token ids out of range"):
        llm.embed([[5, 10**6]])
    with pytest.raises(ValueError, match="empty"):
        llm.embed([[]])
    assert llm.embed([]).shape == (0, 64)
    assert llm.embed(TEXTS[:2]).shape == (2, 64)            # still serving after the refusals


def test_embed_async_equals_embed_and_gives_up_without_blocks(tiny_bert, monkeypatch):
    """The server's path (Embedder.embed_async: the loop thread runs the job, its last step wakes
    the coroutine) gives LLM.embed's vectors, for short inputs (tokenized on the event loop) and
    long ones (on a worker thread); a job that gets no KV blocks is cancelled with a clear error
    after the stall deadline, and the engine serves the next one."""
    import asyncio

    import localllm.embed as embed_module
    from localllm.embed import EmbeddingError
    from localllm.engine.kv_blocks import BlockTable
    _, gguf = tiny_bert("f32")
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    for inputs in (TEXTS[:1], TEXTS, TEXTS * 8):
        want = llm.embed(inputs)
        got, n_tokens = asyncio.run(llm.embedder.embed_async(inputs))
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert n_tokens == sum(len(llm.tokenize(t)) for t in inputs)
    pool = llm.engine.pool
    held = BlockTable(pool)
    held.ensure(pool.num_free * pool.block_size)             # generation holding the whole pool
    monkeypatch.setattr(embed_module, "_BLOCK_WAIT_S", 0.3)
    with pytest.raises(EmbeddingError, match="no KV blocks came free"):
        asyncio.run(llm.embedder.embed_async(TEXTS[:1]))
    held.free()
    got, _ = asyncio.run(llm.embedder.embed_async(TEXTS[1:2]))
    np.testing.assert_allclose(got, llm.embed(TEXTS[1:2]), atol=1e-6)
