#!/usr/bin/env python3
"""Builds llama.cpp's `llama-imatrix`, `llama-quantize` and `llama-perplexity` from the same vendored
source and flags as `llamaserver_build.py` (into the same build folder, so the libraries are shared):
the references the imatrix and importance-weighted quantization tests and docs/quantization.md
compare against.

    python benchmarks/llamacpp_tools_build.py       # prints the folder holding the binaries
"""
from __future__ import annotations

from pathlib import Path

from llamacpp_source import ROOT
from llamacpp_venv import CMAKE_ARGS
from llamaserver_build import build_llamacpp_targets

TOOLS = ["llama-imatrix", "llama-quantize", "llama-perplexity"]


def ensure_llamacpp_tools(jobs: int = 2) -> Path:
    """The folder holding TOOLS, compiling them first when missing (several minutes)."""
    flags = [*CMAKE_ARGS.split(), "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
             "-DLLAMA_BUILD_SERVER=ON"]
    return build_llamacpp_targets(ROOT / "build", flags, TOOLS, jobs)


if __name__ == "__main__":
    print(ensure_llamacpp_tools())
