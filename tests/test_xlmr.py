"""XLM-RoBERTa (the bge-reranker family, bge-m3, multilingual-e5) against transformers: tiny
random checkpoints with locally trained SentencePiece Unigram tokenizers (tests/xlmr_models.py),
converted by our converter to F32 (and Q8_0 for the embedder). Token ids equal XLMRobertaTokenizerFast's on mixed text and on
query/document pairs (with SentencePiece's precompiled NFKC charsmap and without one); rerank
scores equal the classifier's logits; embeddings match transformers' pooled states."""
from __future__ import annotations

import numpy as np
import pytest

from embed_models import cosines, hf_embeddings, hf_rerank_logits, hf_tokenizer
from localllm import LLM
from localllm_convert import convert
from xlmr_models import MIXED, PAIRS, XLMR, as_llamacpp_writes, build_xlmr

_CACHE: dict = {}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    def get(name: str, type_: str = "f32"):
        if name not in _CACHE:
            base = tmp_path_factory.mktemp(name)
            _CACHE[name] = build_xlmr(base / "hf", classifier=name.startswith("reranker"),
                                      charsmap=not name.endswith("plain"))
        if (name, type_) not in _CACHE:
            gguf = _CACHE[name].parent / f"{name}-{type_}.gguf"
            convert(_CACHE[name], gguf, type=type_, progress=False)
            _CACHE[name, type_] = gguf
        return _CACHE[name], _CACHE[name, type_]
    return get


@pytest.mark.parametrize("name", ["reranker", "reranker-plain"])
def test_unigram_tokens_equal_transformers(converted, name):
    hf_dir, gguf = converted(name)
    llm = LLM(str(gguf), n_threads=1, n_ctx=256)
    assert llm.tokenizer.model == "t5"
    tok = hf_tokenizer(hf_dir)
    for text in MIXED:
        assert llm.tokenize(text) == tok(text)["input_ids"], text
    for query, documents in PAIRS:
        for doc in documents:
            ids, types = llm.embedder.pair(query, doc, truncate=False, what="pair")
            assert ids == tok(query, doc)["input_ids"], (query, doc)
            assert types == [0] * len(ids)          # one token type
    assert llm.detokenize(llm.tokenize("Hello world!", add_special=False)) == "Hello world!"
    special_text = "<s>Hello</s> world <unk>"
    assert llm.tokenize(special_text, parse_special=True) == tok(special_text)["input_ids"]
    assert 0 not in llm.tokenize(special_text, add_special=False)   # plain text: pieces only, as llama.cpp


def test_charsmap_is_in_the_file_and_normalizes(converted):
    hf_dir, gguf = converted("reranker")
    llm = LLM(str(gguf), n_threads=1, n_ctx=256)
    assert len(bytes(np.asarray(llm.gguf.get("tokenizer.ggml.precompiled_charsmap"), np.uint8))) > 1000
    # NFKC: full-width letters and the circled digit tokenize as their plain forms
    assert llm.tokenize("Ｆｕｌｌ ①") == llm.tokenize("Full 1")


@pytest.mark.parametrize("name", ["reranker", "reranker-plain"])
def test_rerank_scores_equal_classifier_logits(converted, name):
    hf_dir, gguf = converted(name)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.embedder.pooling == "rank"
    for query, documents in PAIRS:
        ref = hf_rerank_logits(hf_dir, query, documents)
        results = llm.rerank(query, documents)
        ours = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
        np.testing.assert_allclose(ours, ref, atol=1e-3)
        assert [r["index"] for r in results] == list(np.argsort(-ref, kind="stable"))


@pytest.mark.parametrize("type_, pooling, floor", [("f32", "mean", 0.9999), ("f32", "cls", 0.9999),
                                                   ("q8_0", "mean", 0.999)])
def test_embeddings_match_transformers(converted, type_, pooling, floor):
    hf_dir, gguf = converted("embedder", type_)
    llm = LLM(str(gguf), n_threads=2, n_ctx=512)
    assert llm.embedder.pooling == "mean"         # from modules.json via bert.pooling_type
    texts = [t for t in MIXED if t]
    ours = llm.embed(texts, pooling=pooling)
    assert cosines(ours, hf_embeddings(hf_dir, texts, pooling)).min() >= floor


def test_embeddings_match_sentence_transformers(converted):
    from sentence_transformers import SentenceTransformer
    hf_dir, gguf = converted("embedder")
    texts = [t for t in MIXED if t]
    ours = LLM(str(gguf), n_threads=2, n_ctx=512).embed(texts)
    ref = SentenceTransformer(str(hf_dir), device="cpu").encode(texts, normalize_embeddings=True)
    assert cosines(ours, ref).min() >= 0.9999


def test_positions_are_offset_and_the_context_is_what_remains(converted):
    hf_dir, gguf = converted("embedder")
    llm = LLM(str(gguf), n_threads=1, n_ctx=512)
    n_pos = XLMR["max_position_embeddings"] - XLMR["pad_token_id"] - 1
    assert llm.embedder.max_tokens == n_pos
    text = "France " * 200
    with pytest.raises(ValueError, match=f"more than the {n_pos}"):
        llm.embed([text])
    ids = hf_tokenizer(hf_dir)(text, truncation=True, max_length=n_pos)["input_ids"]
    ours = llm.embed([text], truncate=True, pooling="mean")
    assert cosines(ours, llm.embed([ids], pooling="mean")).min() >= 0.99999
    assert llm.embedder.tokenize([text], truncate=True)[0] == ids   # the beginning and the closing </s>


def test_converter_refuses_what_it_cannot_write(converted, tmp_path):
    import json
    import shutil

    from localllm_convert import CheckpointError, VocabError
    hf_dir, _ = converted("embedder")
    bad = tmp_path / "bad"
    shutil.copytree(hf_dir, bad)
    tok = json.loads((bad / "tokenizer.json").read_text())
    (bad / "tokenizer.json").write_text(json.dumps({**tok, "model": {"type": "WordPiece", "vocab": {}}}))
    with pytest.raises(VocabError, match="Unigram"):
        convert(bad, tmp_path / "bad.gguf", type="f32", progress=False)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2}))
    with pytest.raises(CheckpointError, match="max_position_embeddings 2 leaves no position"):
        convert(bad, tmp_path / "bad.gguf", type="f32", progress=False)


def test_rerank_over_http(converted):
    """`localllm serve` with the XLM-R reranker: /v1/rerank answers transformers' logits, and the
    usage counts the <s> q </s></s> d </s> tokens."""
    import httpx

    from serving import LiveServer
    hf_dir, gguf = converted("reranker")
    query, documents = PAIRS[0]
    ref = hf_rerank_logits(hf_dir, query, documents)
    n_tokens = sum(len(hf_tokenizer(hf_dir)(query, d)["input_ids"]) for d in documents)
    with LiveServer(gguf, "-c", "512") as srv:
        r = httpx.post(f"{srv.url}/v1/rerank", json={"query": query, "documents": documents}, timeout=60).json()
    assert [x["index"] for x in r["results"]] == list(np.argsort(-ref, kind="stable"))
    for x in r["results"]:
        assert abs(x["relevance_score"] - ref[x["index"]]) < 1e-3
    assert r["usage"]["total_tokens"] == n_tokens


def test_a_file_as_llamacpp_writes_it(converted, tmp_path):
    """No pooling key (a classifier head makes it a reranker) and remove_extra_whitespaces false
    (whitespace runs still split words, as transformers tokenizes)."""
    hf_dir, gguf = converted("reranker")
    llm = LLM(str(as_llamacpp_writes(gguf, tmp_path / "llamacpp-style.gguf")), n_threads=2, n_ctx=512)
    assert llm.gguf.get("bert.pooling_type") is None and llm.embedder.pooling == "rank"
    assert llm.gguf.get("tokenizer.ggml.remove_extra_whitespaces") is False
    tok = hf_tokenizer(hf_dir)
    for text in MIXED:
        assert llm.tokenize(text) == tok(text)["input_ids"], text
    query, documents = PAIRS[1]
    scores = [r["relevance_score"] for r in sorted(llm.rerank(query, documents), key=lambda r: r["index"])]
    np.testing.assert_allclose(scores, hf_rerank_logits(hf_dir, query, documents), atol=1e-3)
