"""The llama.cpp every benchmark compares against: llama-cpp-python (which builds llama.cpp from
source; llamacpp_source.py unpacks it and fixes its AMX path) in one cache venv, built once;
shared by compare_llamacpp.py, batched.py and the converter benchmarks (convert_common.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llamacpp_source import LLAMA_CPP_PYTHON, SOURCE_TAG, package_source

VENV = Path(os.environ.get("LOCALLLM_BENCH_VENV", Path.home() / ".cache" / "localllm" / "bench-venv"))
DEFAULT_MODELS = ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"]


# llama.cpp built for this CPU, AMX included where the compiler and CPU have it (as llama.cpp's
# own release builds do with GGML_NATIVE). LOCALLLM_LLAMACPP_CMAKE_ARGS builds it otherwise, e.g.
# for AVX2 only (with LOCALLLM_BENCH_VENV naming another venv), to compare localllm's AVX2 level
# (LOCALLLM_ISA=avx2) with llama.cpp's on an AVX-512 machine.
CMAKE_ARGS = os.environ.get("LOCALLLM_LLAMACPP_CMAKE_ARGS", "-DGGML_NATIVE=ON")


def ensure_venv() -> Path:
    """The venv's python, building llama-cpp-python into it first when it is missing or was built
    with other flags (the flags are kept in the venv beside it)."""
    py = VENV / "bin" / "python"
    stamp = VENV / "localllm-cmake-args.txt"
    probe = subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True) if py.exists() else None
    built_as = stamp.read_text() if stamp.exists() else None
    wanted = f"{SOURCE_TAG} {CMAKE_ARGS}"
    if probe is None or probe.returncode != 0 or built_as != wanted:
        print(f"building {LLAMA_CPP_PYTHON} into {VENV} with CMAKE_ARGS={CMAKE_ARGS} "
              f"(compiles llama.cpp; several minutes)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-cache-dir", "--force-reinstall",
                        str(package_source())],
                       check=True, env=dict(os.environ, CMAKE_ARGS=CMAKE_ARGS))
        stamp.write_text(wanted)
    return py


def llamacpp_system_info() -> str:
    """llama.cpp's own list of the CPU features it was built with and uses (run in the venv)."""
    import llama_cpp
    return llama_cpp.llama_print_system_info().decode()
