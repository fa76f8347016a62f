"""CI smoke of the atheris harnesses in tests/fuzz (about a minute in all, normal build): each
runs for a few seconds from its seed corpus and must end without a finding. The long runs and
their figures are in docs/reliability.md."""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import package_env

import atheris  # noqa: F401  (the test extra; a missing one fails collection)

FUZZ = Path(__file__).resolve().parent / "fuzz"
REPO = FUZZ.parent.parent
SECONDS = {"fuzz_gguf.py": 12, "fuzz_tokenizer.py": 12, "fuzz_chat.py": 12, "fuzz_convert.py": 12}


@pytest.mark.parametrize("harness", list(SECONDS))
def test_harness_smoke(harness, tmp_path):
    # libFuzzer's RSS figure is the process's peak, and Linux carries the peak across fork and
    # exec: a child of this test run starts at the run's own peak (gigabytes, with the models and
    # transformers loaded). The bound is libFuzzer's default 2048 MB above that inherited peak.
    inherited_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    proc = subprocess.run([sys.executable, str(FUZZ / harness), f"-max_total_time={SECONDS[harness]}",
                           "-print_final_stats=1", "-seed=1", f"-rss_limit_mb={inherited_mb + 2048}"],
                          cwd=tmp_path, env=package_env(), capture_output=True, text=True,
                          timeout=SECONDS[harness] + 180)
    # atheris prints an uncaught exception's traceback on stdout, libFuzzer its report on stderr.
    tail = proc.stdout[-3000:] + "\n" + proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    assert "Done " in proc.stderr and "stat::number_of_executed_units:" in proc.stderr, tail
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*")), tail
