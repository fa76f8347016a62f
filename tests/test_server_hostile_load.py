"""A short run (about 30 s) of benchmarks/hostile_load.py: 64 clients mixing normal seeded
requests with oversize, slow, disconnecting and costly ones against a live server. No 5xx but
503, no KV block left in use, memory flat, seeded outputs unchanged."""
from __future__ import annotations

import sys
from pathlib import Path

from conftest import model_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import hostile_load  # noqa: E402


def test_hostile_load_short(tmp_path):
    with open(tmp_path / "server.log", "w") as log:
        result = hostile_load.run(str(model_file("smollm2-135m-q4_1")), seconds=30, clients=64, log=log)
    assert result["failures"] == [], result
    outcomes = result["outcomes"]
    for job in ("normal", "oversize", "slow", "disconnect", "costly"):
        assert any(k.startswith(job) for k in outcomes), outcomes
    assert outcomes.get("normal 200", 0) >= 20 and result["kv_blocks_used_idle"] == 0
