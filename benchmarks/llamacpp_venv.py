"""The llama.cpp every benchmark compares against: llama-cpp-python (which builds llama.cpp from
source) in one cache venv, built once; shared by compare_llamacpp.py, batched.py and the
converter benchmarks (convert_common.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

VENV = Path(os.environ.get("LOCALLLM_BENCH_VENV", Path.home() / ".cache" / "localllm" / "bench-venv"))
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
DEFAULT_MODELS = ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"]


def ensure_venv() -> Path:
    """The venv's python, building llama-cpp-python into it first when it is missing."""
    py = VENV / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True) if py.exists() else None
    if probe is None or probe.returncode != 0:
        print(f"building {LLAMA_CPP_PYTHON} into {VENV} (compiles llama.cpp; several minutes)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        # Native flags, minus AMX: a native build died with SIGILL on the development VM;
        # llama.cpp keeps its AVX-512 and repacked kernels.
        no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        env = dict(os.environ, CMAKE_ARGS=f"-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='{no_amx}' "
                                          f"-DCMAKE_CXX_FLAGS='{no_amx}'")
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-cache-dir", LLAMA_CPP_PYTHON],
                       check=True, env=env)
    return py
