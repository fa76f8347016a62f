#!/usr/bin/env python3
"""Builds llama.cpp's own `llama-server` from the llama.cpp source that llama-cpp-python 0.3.36's
sdist vendors: the same llama.cpp release the CPU benchmarks compare against (llamacpp_venv.py),
with the same flags (native by default) minus AMX. Built once into ~/.cache/localllm/llama-server/
(LOCALLLM_LLAMA_SERVER_DIR elsewhere), again when the flags change.

    python benchmarks/llamaserver_build.py          # prints the binary's path
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from llamacpp_venv import CMAKE_ARGS, LLAMA_CPP_PYTHON

ROOT = Path(os.environ.get("LOCALLLM_LLAMA_SERVER_DIR", Path.home() / ".cache" / "localllm" / "llama-server"))
BINARY = ROOT / "build" / "bin" / "llama-server"


def _sdist() -> Path:
    """The llama-cpp-python sdist (a .tar.gz), downloaded through pip once."""
    dl = ROOT / "sdist"
    found = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        dl.mkdir(parents=True, exist_ok=True)
        # Only this package as source; its build backend (scikit-build-core) is not built from
        # source too, as ":all:" would do.
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                        "--no-build-isolation", "-d", str(dl), LLAMA_CPP_PYTHON], check=True)
        found = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise RuntimeError(f"pip download of {LLAMA_CPP_PYTHON} left no sdist in {dl}")
    return found[-1]


def _llama_cpp_source() -> Path:
    """The vendor/llama.cpp directory of the unpacked sdist."""
    src_root = ROOT / "src"
    hits = list(src_root.glob("llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt"))
    if not hits:
        src_root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(_sdist()) as tar:
            tar.extractall(src_root, filter="data")
        hits = list(src_root.glob("llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt"))
    if not hits:
        raise RuntimeError(f"no vendor/llama.cpp in the {LLAMA_CPP_PYTHON} sdist")
    return hits[0].parent


def ensure_llama_server(jobs: int = 2) -> Path:
    """The llama-server binary, configuring and compiling it first when it is missing or was built
    with other flags (kept beside it)."""
    build = ROOT / "build"
    # The flags llamacpp_venv.py builds the CPU benchmarks' llama.cpp with (native by default;
    # LOCALLLM_LLAMACPP_CMAKE_ARGS for another level, with LOCALLLM_LLAMA_SERVER_DIR elsewhere),
    # minus AMX: a C++ binary has no hook to ask Linux for the AMX tile state before llama.cpp
    # first uses it (llamacpp_venv.request_amx_permission does that for the Python workers).
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    flags = [*CMAKE_ARGS.split(), f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"]
    stamp = build / "localllm-cmake-args.txt"
    if BINARY.exists() and stamp.exists() and stamp.read_text() == " ".join(flags):
        return BINARY
    src = _llama_cpp_source()
    print(f"building llama-server from {src} into {build} with {flags} (several minutes)", file=sys.stderr)
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", *flags, "-DLLAMA_CURL=OFF",
                    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON"],
                   check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], check=True)
    if not BINARY.exists():
        raise RuntimeError(f"the build finished without {BINARY}")
    stamp.write_text(" ".join(flags))
    return BINARY


if __name__ == "__main__":
    print(ensure_llama_server())
