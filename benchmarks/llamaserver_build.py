#!/usr/bin/env python3
"""Builds llama.cpp's own `llama-server` from the llama.cpp source that llama-cpp-python 0.3.36's
sdist vendors (llamacpp_source.py, with its AMX fix): the same llama.cpp the CPU benchmarks compare
against (llamacpp_venv.py), with the same flags (native by default, AMX included where the CPU has
it). Built once into ~/.cache/localllm/llama-server/ (LOCALLLM_LLAMA_SERVER_DIR elsewhere), again
when the flags change. `build_llamacpp_targets` is the one way the benchmarks build llama.cpp's
binaries (llamacpp_vulkan_build.py builds its Vulkan ones with it).

    python benchmarks/llamaserver_build.py          # prints the binary's path
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llamacpp_source import ROOT, SOURCE_TAG, llama_cpp_source
from llamacpp_venv import CMAKE_ARGS

BINARY = ROOT / "build" / "bin" / "llama-server"


def build_llamacpp_targets(build: Path, flags: list[str], targets: list[str], jobs: int = 2,
                           nice: bool = False, source_tag: str = SOURCE_TAG) -> Path:
    """Configures llama.cpp's source into `build` with `flags` and compiles `targets`, unless every
    target's binary is there from a build with the same source (source_tag names it and any fix
    made to it) and flags, kept beside them in a stamp file. Returns build/bin. `nice` runs the
    compiler at the lowest priority."""
    bin_dir = build / "bin"
    stamp = build / "localllm-cmake-args.txt"
    built_as = " ".join([source_tag, *flags])
    if all((bin_dir / t).exists() for t in targets) and stamp.exists() and stamp.read_text() == built_as:
        return bin_dir
    src = llama_cpp_source()
    print(f"building {' '.join(targets)} from {src} into {build} with {flags} (several minutes)", file=sys.stderr)
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    *flags], check=True)
    prefix = ["nice", "-n", "19"] if nice else []
    subprocess.run([*prefix, "cmake", "--build", str(build), "--target", *targets, "-j", str(jobs)], check=True)
    missing = [t for t in targets if not (bin_dir / t).exists()]
    if missing:
        raise RuntimeError(f"the build finished without {missing} in {bin_dir}")
    stamp.write_text(built_as)
    return bin_dir


def ensure_llama_server(jobs: int = 2) -> Path:
    """The llama-server binary, configuring and compiling it first when it is missing or was built
    with other flags."""
    # The flags llamacpp_venv.py builds the CPU benchmarks' llama.cpp with (native by default;
    # LOCALLLM_LLAMACPP_CMAKE_ARGS for another level, with LOCALLLM_LLAMA_SERVER_DIR elsewhere).
    # AMX stays on, as llama-bench would run it (llamacpp_source.py fixes its tile configuration).
    flags = [*CMAKE_ARGS.split(), "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
             "-DLLAMA_BUILD_SERVER=ON"]
    return build_llamacpp_targets(ROOT / "build", flags, ["llama-server"], jobs) / "llama-server"


if __name__ == "__main__":
    print(ensure_llama_server())
