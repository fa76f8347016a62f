"""Timed passes of an embedding function over a list of texts: the one measurement both sides of
benchmarks/embeddings.py's in-process comparison run (imported by llama-cpp-python's venv too,
so it needs nothing but the standard library)."""
from __future__ import annotations

import time


def rate(fn, items: list, batch: int) -> float:
    """Items per second of fn over items, `batch` at a time."""
    t0 = time.perf_counter()
    for i in range(0, len(items), batch):
        fn(items[i:i + batch])
    return len(items) / (time.perf_counter() - t0)


def passes(embed, data: list[str]) -> dict:
    """Texts per second and process CPU ms per text of `embed` over data, 1 and 64 texts a call."""
    embed(data[:64])                                          # warm-up
    out = {}
    for b in (1, 64):
        cpu0 = time.process_time()
        texts_s = rate(embed, data, b)
        out[f"batch{b}"] = {"texts_s": round(texts_s, 1),
                            "cpu_ms_per_text": round((time.process_time() - cpu0) * 1e3 / len(data), 3)}
    return out
