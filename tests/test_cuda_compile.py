"""The CUDA sources compile for sm_90 with the CUDA compiler wheels from PyPI, on a machine with
no GPU, and the resulting _core imports and runs its CPU path there (tests/cuda_compile_check.sh).
CMake, Ninja and pybind11 come with the test extra; skipped only where the wheels cannot be
installed (no package registry)."""
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "cuda_compile_check.sh"


def test_cuda_sources_compile_with_the_registry_nvcc():
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=3600)
    tail = (r.stdout + r.stderr)[-4000:]
    if r.returncode == 3:
        pytest.skip("the CUDA compiler wheels could not be installed (no package registry): " + tail[-500:])
    assert r.returncode == 0, tail
    assert "cuda compile check passed" in r.stdout
