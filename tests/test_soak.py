"""A short soak of the engine (benchmarks/soak.py runs the long one, >= 10,000 requests): random
prompts, lengths and sampling settings, aborts and preemption, bounded in time. No request
fails, no KV block stays held, resident memory stays flat after warm-up."""
from __future__ import annotations

import sys
from pathlib import Path

from conftest import model_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import soak  # noqa: E402


def test_short_soak():
    from localllm import LLM
    llm = LLM(str(model_file("smollm2-135m-q4_1")), n_ctx=1024, seed=0, kv_blocks=24, max_running=16)
    r = soak.soak(llm, n_requests=600, max_seconds=240, seed=1, abort_rate=0.15, warm_fraction=0.5)
    assert r["requests"] == 600, r                       # all submitted within the time bound
    assert r["errors"] == 0, r
    assert r["finished"] + r["aborted"] == 600, r
    assert r["aborted"] > 0 and r["preemptions"] > 0, r  # the paths the soak is for were taken
    assert r["blocks_used_at_end"] == 0, r               # every block free or cached
    assert r["rss_growth"] < 0.02, r
