"""Speed measurement in llama-bench's manner: pp = one batch of N prompt tokens from an empty
cache, tg = N single-token decode steps from an empty cache; random token ids; a warm-up run
first; mean and standard deviation of tokens/second over repetitions."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from .engine.kv_blocks import BlockTable

__all__ = ["BenchResult", "bench_prompt", "bench_generation", "run_bench"]


@dataclass
class BenchResult:
    test: str               # "pp512" / "tg128"
    n_prompt: int
    n_gen: int
    samples_ns: list[int]

    @property
    def n_tokens(self) -> int:
        return self.n_prompt or self.n_gen

    @property
    def samples_ts(self) -> list[float]:
        return [self.n_tokens * 1e9 / ns for ns in self.samples_ns]

    @property
    def avg_ts(self) -> float:
        return statistics.fmean(self.samples_ts)

    @property
    def stddev_ts(self) -> float:
        return statistics.stdev(self.samples_ts) if len(self.samples_ts) > 1 else 0.0

    @property
    def avg_ns(self) -> int:
        return int(statistics.fmean(self.samples_ns))


def _forward(llm, table: BlockTable, tokens: np.ndarray, start: int, out: np.ndarray) -> None:
    """One forward; the last token's logits go to `out` [1, n_vocab], reused as the engine reuses
    its logits buffer (a fresh array per token would time page faults, not the model)."""
    n = len(tokens)
    table.ensure(start + n)
    llm._model.forward(tokens.astype(np.int32), np.arange(start, start + n, dtype=np.int32),
                       np.zeros(n, np.int32), np.asarray([table.blocks], np.int32),
                       np.asarray([n - 1], np.int32), out)


def bench_prompt(llm, n_prompt: int, rng: np.random.Generator) -> int:
    """Nanoseconds for one forward over n_prompt random tokens (in n_batch chunks)."""
    table = BlockTable(llm._pool)
    tokens = rng.integers(0, llm.n_vocab, size=n_prompt)
    out = np.empty((1, llm.n_vocab), np.float32)
    try:
        t0 = time.perf_counter_ns()
        for c in range(0, n_prompt, llm.n_batch):
            _forward(llm, table, tokens[c:c + llm.n_batch], c, out)
        return time.perf_counter_ns() - t0
    finally:
        table.free()


def bench_generation(llm, n_gen: int, rng: np.random.Generator) -> int:
    """Nanoseconds for n_gen single-token forwards at positions 0..n_gen-1."""
    table = BlockTable(llm._pool)
    tokens = rng.integers(0, llm.n_vocab, size=n_gen)
    out = np.empty((1, llm.n_vocab), np.float32)
    try:
        t0 = time.perf_counter_ns()
        for i in range(n_gen):
            _forward(llm, table, tokens[i:i + 1], i, out)
        return time.perf_counter_ns() - t0
    finally:
        table.free()


def run_bench(llm, n_prompt: int = 512, n_gen: int = 128, repetitions: int = 5,
              seed: int = 0) -> list[BenchResult]:
    rng = np.random.default_rng(seed)
    results = []
    if n_prompt > 0:
        bench_prompt(llm, min(n_prompt, 32), rng)                      # warm-up
        samples = [bench_prompt(llm, n_prompt, rng) for _ in range(repetitions)]
        results.append(BenchResult(f"pp{n_prompt}", n_prompt, 0, samples))
    if n_gen > 0:
        bench_generation(llm, min(n_gen, 8), rng)                      # warm-up
        samples = [bench_generation(llm, n_gen, rng) for _ in range(repetitions)]
        results.append(BenchResult(f"tg{n_gen}", 0, n_gen, samples))
    return results
