"""Embeddings and reranking: pooled hidden states of many texts, packed into few forwards.

`Embedder` serves `LLM.embed` / `LLM.rerank` (and through them the server's /v1/embeddings and
/v1/rerank and `localllm embed`). Texts are tokenized, packed whole into the engine's steps
(`localllm.engine.embedding_jobs`: up to `n_batch` tokens, beside the step's generation, a longer
text alone), each sequence at positions 0.. with its own KV blocks for its forward; the model
returns the final hidden states of the rows pooling needs, pooled there:

* ``mean``: the average of a text's token states (sentence-transformers' mean pooling);
* ``cls``: the first token's state; ``last``: the last token's (decoder embedders, Qwen3-Embedding);
* ``rank``: the first token's state through the classification head (a cross-encoder's pooler
  ``tanh(cls · h + b)`` then ``cls.output``): one score per query-document pair;
* ``none``: no pooling, which has no single vector per text and is refused.

The pooling comes from the GGUF's ``{arch}.pooling_type`` (llama.cpp's numbers) and can be
overridden per call.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .engine.aio import embedding_finished
from .engine.embedding_jobs import EmbeddingJob

if TYPE_CHECKING:
    from .llm import LLM

__all__ = ["POOLING_TYPES", "Embedder", "EmbeddingError"]

# llama.cpp's enum llama_pooling_type, the numbers {arch}.pooling_type holds.
POOLING_TYPES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_POOLING_NAMES = {v: k for k, v in POOLING_TYPES.items()}
_BLOCK_WAIT_S = 60.0     # how long embeddings wait, without progress, for KV blocks generation holds
_LOOP_TOKENIZE_CHARS = 1024   # embed_async tokenizes inputs up to this size on the event loop (~0.1 ms)


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
        names = {t.name for t in llm.gguf.tensors}
        value = llm.gguf.get(f"{self.arch}.pooling_type")
        if value is None:
            # llama.cpp's converter writes no pooling for a sequence classifier (its server is told
            # --reranking): the classifier head says what it is. Decoders without the key are not
            # made for embeddings.
            value = POOLING_TYPES["rank" if "cls.output.weight" in names else "none"]
        if value not in _POOLING_NAMES:
            raise EmbeddingError(f"{self.arch}.pooling_type = {value!r} is not a known pooling type "
                                 f"(0-4: {', '.join(POOLING_TYPES)})")
        self.pooling: str = _POOLING_NAMES[value]
        # Learned absolute positions (bert) end at the model's trained context.
        limit = llm.n_ctx
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
        """A cross-encoder's input as llama.cpp builds it from the vocabulary's flags: BOS query EOS
        (SEP where add_sep) document EOS, i.e. [CLS] q [SEP] d [SEP] for BERT and <s> q </s></s> d
        </s> for XLM-R; token types 0 then 1 where the model has two."""
        tok = self._llm.tokenizer
        q = self._llm.tokenize(query, add_special=False)
        d = self._llm.tokenize(document, add_special=False)
        head = [tok.bos_id] + q + [tok.eos_id] + ([tok.sep_id] if tok.add_sep else [])
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

    # ---- forwards (through the engine's steps) ----
    def _job(self, seqs: Sequence[list[int]], pooling: str, types: Sequence[list[int]] | None = None) -> EmbeddingJob:
        pool = self._llm.engine.pool
        for i, s in enumerate(seqs):
            if -(-len(s) // pool.block_size) > pool.capacity:
                raise EmbeddingError(f"input {i} needs more KV blocks than the pool has ({pool.capacity}); "
                                     f"raise n_ctx")
        return EmbeddingJob([list(s) for s in seqs], "cls" if pooling == "rank" else pooling,
                            np.empty((len(seqs), self.n_embd), np.float32), None if types is None else list(types))

    def _stalled(self, job: EmbeddingJob) -> EmbeddingError:
        """Cancel a job that waited _BLOCK_WAIT_S without progress; the error to raise."""
        self._llm.engine.embeddings.cancel(job, EmbeddingError("gave up waiting for KV blocks"))
        return EmbeddingError(f"no KV blocks came free for this input in {_BLOCK_WAIT_S:.0f} s "
                              f"(generation holds the pool)")

    def hidden(self, seqs: Sequence[list[int]], pooling: str,
               types: Sequence[list[int]] | None = None) -> np.ndarray:
        """The pooled final hidden state of each sequence, float32 [n, n_embd]: one job the
        engine's steps run (engine/embedding_jobs.py), beside any generation."""
        engine = self._llm.engine
        job = self._job(seqs, pooling, types)
        if not seqs:
            return job.out
        loop = engine.loop_running               # else this thread steps the engine itself
        if not (loop and engine.run_embedding_here(job)):
            engine.submit_embedding(job)
        seen, deadline = -1, time.monotonic() + _BLOCK_WAIT_S
        while not job.done.is_set():
            if not (not loop and engine.step()):
                job.done.wait(0.05 if loop else 0.005)
            if (job.next, job.pos) != seen:
                seen, deadline = (job.next, job.pos), time.monotonic() + _BLOCK_WAIT_S
            elif time.monotonic() > deadline and not job.done.is_set():
                raise self._stalled(job)
        if job.error is not None:
            raise job.error
        return job.out

    # ---- results ----
    def _check(self, pooling: str | None, dimensions: int | None) -> str:
        """The pooling to use; EmbeddingError for a request this model cannot serve."""
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
        return pooling

    @staticmethod
    def _shaped(vectors: np.ndarray, normalize: bool, dimensions: int | None) -> np.ndarray:
        if dimensions is not None:
            vectors = np.ascontiguousarray(vectors[:, :dimensions])
        if normalize:
            norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
            vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
        return vectors

    def embed(self, inputs: Sequence[str | Sequence[int]], normalize: bool = True, dimensions: int | None = None,
              pooling: str | None = None, truncate: bool = False) -> tuple[np.ndarray, int]:
        """(vectors float32 [n, d], tokens used)."""
        pooling = self._check(pooling, dimensions)
        seqs = self.tokenize(inputs, truncate)
        vectors = self.hidden(seqs, pooling) if seqs else np.zeros((0, self.n_embd), np.float32)
        return self._shaped(vectors, normalize, dimensions), sum(len(s) for s in seqs)

    async def embed_async(self, inputs: Sequence[str | Sequence[int]], normalize: bool = True,
                          dimensions: int | None = None, pooling: str | None = None,
                          truncate: bool = False) -> tuple[np.ndarray, int]:
        """`embed` for a coroutine (the server): the engine's step-loop thread runs the job and
        its last step wakes the coroutine; no thread waits in between. Inputs of up to
        _LOOP_TOKENIZE_CHARS characters (or token ids) in all are tokenized on the event loop
        (microseconds; a hand-off to a thread and back costs more), longer ones on a worker
        thread."""
        pooling = self._check(pooling, dimensions)
        if sum(len(x) for x in inputs) <= _LOOP_TOKENIZE_CHARS:
            seqs = self.tokenize(inputs, truncate)
        else:
            seqs = await asyncio.to_thread(self.tokenize, inputs, truncate)
        job = self._job(seqs, pooling)
        if seqs:
            if not await embedding_finished(self._llm.engine, job, _BLOCK_WAIT_S):
                raise self._stalled(job)
            if job.error is not None:
                raise job.error
        return self._shaped(job.out, normalize, dimensions), sum(len(s) for s in seqs)

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
