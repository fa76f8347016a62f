"""Perplexity with llama.cpp's method (its `llama-perplexity` defaults).

Tokenize the whole text (adding BOS as the model's metadata says), cut it into chunks of n_ctx
tokens, put BOS first in every chunk when the model adds BOS, evaluate each chunk from an empty
cache, and score only the second half of each chunk: the token after position j for
j in [n_ctx/2, n_ctx - 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["PerplexityResult", "perplexity"]


@dataclass
class PerplexityResult:
    ppl: float
    stderr: float          # standard error of the PPL estimate, as llama.cpp reports it
    n_chunks: int
    n_scored: int


def _log_softmax_at(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(x - mx).sum(axis=1))
    return x[np.arange(len(targets)), targets] - lse


def perplexity(llm, text: str, n_ctx: int, max_chunks: int | None = None,
               progress: Callable[[int, int, float], None] | None = None) -> PerplexityResult:
    if n_ctx < 4 or n_ctx > llm.n_ctx:
        raise ValueError(f"perplexity context {n_ctx} must be in [4, {llm.n_ctx}] (the LLM's n_ctx)")
    tokens = llm.tokenize(text, add_special=True, parse_special=False)
    n_chunks = len(tokens) // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        raise ValueError(f"the text has {len(tokens)} tokens: need at least n_ctx={n_ctx}")
    add_bos = llm.tokenizer.add_bos
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    for i in range(n_chunks):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if add_bos:
            chunk[0] = llm.tokenizer.bos_id
        logits = llm.logits(chunk, rows=range(first, n_ctx - 1))          # [n_ctx/2 - 1, n_vocab]
        targets = np.asarray(tokens[i * n_ctx + first + 1:(i + 1) * n_ctx], dtype=np.int64)
        lp = _log_softmax_at(logits, targets)
        nll -= float(lp.sum())
        nll2 += float((lp * lp).sum())
        count += len(lp)
        if progress is not None:
            progress(i + 1, n_chunks, math.exp(nll / count))
    mean = nll / count
    var = nll2 / count - mean * mean
    stderr_nll = math.sqrt(max(var, 0.0) / max(count - 1, 1))
    ppl = math.exp(mean)
    return PerplexityResult(ppl, ppl * stderr_nll, n_chunks, count)
