#!/usr/bin/env python3
"""Builds llama.cpp's Vulkan backend (`llama-bench`, with the CPU backend beside it) from the
llama.cpp source the other benchmarks use (llamacpp_source.py: llama-cpp-python 0.3.36's vendored
llama.cpp) into ~/.cache/localllm/llama-server/build-vulkan/ (LOCALLLM_LLAMA_SERVER_DIR
elsewhere), once, again when the flags change. vulkan_vs_llamacpp.py runs it.

Needs what localllm's own Vulkan build needs (libvulkan-dev, glslc). The compiler runs at the
lowest priority (`nice -n 19`); ggml-vulkan's shader generation compiles a few thousand shader
variants with glslc, so the first build takes a while.

    python benchmarks/llamacpp_vulkan_build.py      # prints llama-bench's path
"""
from __future__ import annotations

import os
import sys

from llamacpp_source import ROOT
from llamaserver_build import build_llamacpp_targets

BUILD = ROOT / "build-vulkan"
TARGETS = ["llama-bench"]
FLAGS = ["-DGGML_VULKAN=ON", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
         "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]


def ensure_llama_bench_vulkan(jobs: int = 2):
    """llama-bench built with ggml's Vulkan backend, building it first when needed."""
    return build_llamacpp_targets(BUILD, FLAGS, TARGETS, jobs, nice=True) / "llama-bench"


if __name__ == "__main__":
    print(ensure_llama_bench_vulkan(int(os.environ.get("LOCALLLM_BUILD_JOBS", "2"))), file=sys.stdout)
