"""Embeddings and reranking: pooled hidden states of many texts, packed into few forwards.

`Embedder` serves `LLM.embed` / `LLM.rerank` (and through them the server's /v1/embeddings and
/v1/rerank and `localllm embed`). Texts are tokenized, packed whole into forwards of up to
`n_batch` tokens (a longer text goes alone), each sequence at positions 0.. with its own KV
blocks; `_core.Model.forward_hidden` returns the final hidden states of the rows pooling needs,
pooled here:

* ``mean``: the average of a text's token states (sentence-transformers' mean pooling);
* ``cls``: the first token's state; ``last``: the last token's (decoder embedders, Qwen3-Embedding);
* ``rank``: the first token's state through the classification head (a cross-encoder's pooler
  ``tanh(cls · h + b)`` then ``cls.output``): one score per query-document pair;
* ``none``: no pooling, which has no single vector per text and is refused.

The pooling comes from the GGUF's ``{arch}.pooling_type`` (llama.cpp's numbers) and can be
overridden per call. Each forward takes the engine's lock on its own, so a server's generation
steps run between the forwards of a long embedding request rather than waiting for all of it.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .engine.kv_blocks import BlockTable

if TYPE_CHECKING:
    from .llm import LLM

__all__ = ["POOLING_TYPES", "Embedder", "EmbeddingError"]

# llama.cpp's enum llama_pooling_type, the numbers {arch}.pooling_type holds.
POOLING_TYPES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_POOLING_NAMES = {v: k for k, v in POOLING_TYPES.items()}
_BLOCK_WAIT_S = 60.0     # how long a forward waits for KV blocks that generation holds


class EmbeddingError(ValueError):
    """A request embeddings or reranking cannot serve (the message says why)."""


class Embedder:
    """Pooled embeddings and rerank scores of one loaded `LLM`."""

    def __init__(self, llm: LLM):
        self._llm = llm
        self._model = llm._model
        hp = self._model.hparams
        self.arch: str = hp["arch"]
        self.n_embd: int = hp["n_embd"]
        self.n_type: int = hp.get("n_type", 0)
        value = llm.gguf.get(f"{self.arch}.pooling_type")
        if value is None:   # decoders without the key: not made for embeddings
            value = POOLING_TYPES["none"]
        if value not in _POOLING_NAMES:
            raise EmbeddingError(f"{self.arch}.pooling_type = {value!r} is not a known pooling type "
                                 f"(0-4: {', '.join(POOLING_TYPES)})")
        self.pooling: str = _POOLING_NAMES[value]
        # Learned absolute positions (bert) end at the model's trained context.
        limit = llm.n_ctx
        names = {t.name for t in llm.gguf.tensors}
        if self._model.bidirectional and "position_embd.weight" in names:
            limit = min(limit, hp["n_ctx_train"])
        self.max_tokens: int = limit
        self._head: tuple[np.ndarray, ...] | None = None

    # ---- inputs ----
    def _fit(self, ids: list[int], truncate: bool, what: str) -> list[int]:
        if not ids:
            raise EmbeddingError(f"{what} is empty (no tokens)")
        if len(ids) <= self.max_tokens:
            return ids
        if not truncate:
            raise EmbeddingError(f"{what} has {len(ids)} tokens, more than the {self.max_tokens} this model "
                                 f"takes; shorten it or ask for truncation (truncate=True)")
        tok = self._llm.tokenizer
        if tok.add_eos and ids[-1] == tok.eos_id:   # keep the closing [SEP] as tokenizers do
            return ids[:self.max_tokens - 1] + ids[-1:]
        return ids[:self.max_tokens]

    def tokenize(self, inputs: Sequence[str | Sequence[int]], truncate: bool) -> list[list[int]]:
        """Token ids of each input (text, or token ids given as they are), fitted to the model."""
        out = []
        for i, item in enumerate(inputs):
            what = f"input {i}"
            if isinstance(item, str):
                ids = self._llm.tokenize(item)
            else:
                ids = [int(t) for t in item]
                bad = [t for t in ids if not 0 <= t < self._llm.n_vocab]
                if bad:
                    raise EmbeddingError(f"{what}: token ids out of range [0, {self._llm.n_vocab}): {bad[:5]}")
            out.append(self._fit(ids, truncate, what))
        return out

    def pair(self, query: str, document: str, truncate: bool, what: str) -> tuple[list[int], list[int]]:
        """A cross-encoder's input: [CLS] query [SEP] document [SEP], token types 0 then 1."""
        tok = self._llm.tokenizer
        q = self._llm.tokenize(query, add_special=False)
        d = self._llm.tokenize(document, add_special=False)
        head = [tok.bos_id] + q + [tok.eos_id]
        room = self.max_tokens - len(head) - 1
        if len(d) > room:
            if not truncate or room < 1:
                raise EmbeddingError(f"{what}: query and document take {len(head) + len(d) + 1} tokens, more than "
                                     f"the {self.max_tokens} this model takes; shorten them or ask for "
                                     f"truncation (truncate=True)")
            d = d[:room]
        ids = head + d + [tok.eos_id]
        types = [0] * len(head) + [1 if self.n_type > 1 else 0] * (len(d) + 1)
        return ids, types

    # ---- forwards ----
    def _blocks(self, n_tokens: int) -> int:
        return -(-n_tokens // self._llm.engine.pool.block_size)

    def _batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Sequence indices packed in order into forwards of up to n_batch tokens whose KV
        blocks fit in the pool (a sequence longer than n_batch goes alone)."""
        pool = self._llm.engine.pool
        if any(self._blocks(n) > pool.capacity for n in lengths):
            raise EmbeddingError(f"an input needs more KV blocks than the pool has ({pool.capacity}); raise n_ctx")
        batches: list[list[int]] = []
        used = blocks = 0
        for i, n in enumerate(lengths):
            b = self._blocks(n)
            if not batches or used + n > self._llm.n_batch or blocks + b > pool.capacity:
                batches.append([])
                used = blocks = 0
            batches[-1].append(i)
            used += n
            blocks += b
        return batches

    def hidden(self, seqs: Sequence[list[int]], pooling: str,
               types: Sequence[list[int]] | None = None) -> np.ndarray:
        """The pooled final hidden state of each sequence, float32 [n, n_embd]."""
        out = np.empty((len(seqs), self.n_embd), np.float32)
        for batch in self._batches([len(s) for s in seqs]):
            tokens = np.concatenate([np.asarray(seqs[i], np.int32) for i in batch])
            positions = np.concatenate([np.arange(len(seqs[i]), dtype=np.int32) for i in batch])
            seq_of = np.concatenate([np.full(len(seqs[i]), j, np.int32) for j, i in enumerate(batch)])
            starts = np.cumsum([0] + [len(seqs[i]) for i in batch])
            if pooling == "mean":
                rows = np.arange(len(tokens), dtype=np.int32)
            elif pooling == "last":
                rows = (starts[1:] - 1).astype(np.int32)
            else:   # cls, rank
                rows = starts[:-1].astype(np.int32)
            tt = None if types is None else np.concatenate([np.asarray(types[i], np.int32) for i in batch])
            h = self._forward(batch, seqs, tokens, positions, seq_of, rows, tt)
            if pooling == "mean":
                for j, i in enumerate(batch):
                    out[i] = h[starts[j]:starts[j + 1]].mean(axis=0, dtype=np.float64)
            else:
                out[batch] = h
        return out

    def _forward(self, batch, seqs, tokens, positions, seq_of, rows, token_types) -> np.ndarray:
        engine = self._llm.engine
        need = sum(self._blocks(len(seqs[i])) for i in batch)
        deadline = time.monotonic() + _BLOCK_WAIT_S
        while True:
            with engine.lock:              # the pool and model are shared with the engine
                if engine.pool.num_free >= need:
                    return self._forward_locked(batch, seqs, tokens, positions, seq_of, rows, token_types)
            if time.monotonic() > deadline:   # generation holds the blocks: wait for some to free
                raise EmbeddingError(f"the KV pool stayed busy for {_BLOCK_WAIT_S:.0f} s ({need} blocks needed, "
                                     f"{engine.pool.num_free} free)")
            time.sleep(0.005)

    def _forward_locked(self, batch, seqs, tokens, positions, seq_of, rows, token_types) -> np.ndarray:
        tables = [BlockTable(self._llm.engine.pool) for _ in batch]
        try:
            for t, i in zip(tables, batch):
                t.ensure(len(seqs[i]))
            width = max(len(t.blocks) for t in tables)
            block_tables = np.zeros((len(batch), width), np.int32)
            for j, t in enumerate(tables):
                block_tables[j, :len(t.blocks)] = t.blocks
            return self._model.forward_hidden(tokens, positions, seq_of, block_tables, rows, token_types)
        finally:
            for t in tables:
                t.free()

    # ---- results ----
    def embed(self, inputs: Sequence[str | Sequence[int]], normalize: bool = True, dimensions: int | None = None,
              pooling: str | None = None, truncate: bool = False) -> tuple[np.ndarray, int]:
        """(vectors float32 [n, d], tokens used)."""
        pooling = self.pooling if pooling is None else pooling
        if pooling not in POOLING_TYPES:
            raise EmbeddingError(f"pooling must be one of {', '.join(POOLING_TYPES)}, got {pooling!r}")
        if pooling == "none":
            raise EmbeddingError(f"this model has no pooling (its {self.arch}.pooling_type is none), so no single "
                                 f"vector per input; ask for pooling mean, cls or last")
        if pooling == "rank":
            raise EmbeddingError("this model is a reranker (rank pooling): score pairs with rerank, or ask for "
                                 "pooling mean, cls or last")
        if dimensions is not None and not 1 <= dimensions <= self.n_embd:
            raise EmbeddingError(f"dimensions must be in [1, {self.n_embd}], got {dimensions}")
        seqs = self.tokenize(inputs, truncate)
        vectors = self.hidden(seqs, pooling) if seqs else np.zeros((0, self.n_embd), np.float32)
        if dimensions is not None:
            vectors = np.ascontiguousarray(vectors[:, :dimensions])
        if normalize:
            norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
            vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
        return vectors, sum(len(s) for s in seqs)

    def _classifier(self) -> tuple[np.ndarray, ...]:
        if self._head is None:
            from . import quants
            gguf = self._llm.gguf
            parts = []
            names = {t.name for t in gguf.tensors}
            for name in ("cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"):
                if name not in names:
                    raise EmbeddingError(f"this model has rank pooling but no classification head ({name} is "
                                         f"missing)")
                t = gguf.tensor(name)
                parts.append(quants.dequantize(gguf.tensor_data(name), t.type, tuple(reversed(t.shape))))
            self._head = tuple(p.astype(np.float64) for p in parts)
        return self._head

    def rerank(self, query: str, documents: Sequence[str], truncate: bool = False) -> tuple[np.ndarray, int]:
        """(one relevance score per document (the classifier's first logit), tokens used)."""
        if self.pooling != "rank":
            raise EmbeddingError(f"this model is not a reranker (its pooling is {self.pooling}, not rank)")
        pairs = [self.pair(query, d, truncate, f"document {i}") for i, d in enumerate(documents)]
        if not pairs:
            return np.zeros(0, np.float32), 0
        h = self.hidden([p[0] for p in pairs], "rank", [p[1] for p in pairs]).astype(np.float64)
        w1, b1, w2, b2 = self._classifier()
        logits = np.tanh(h @ w1.T + b1) @ w2.T + b2
        return logits[:, 0].astype(np.float32), sum(len(p[0]) for p in pairs)
