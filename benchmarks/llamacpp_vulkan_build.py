#!/usr/bin/env python3
"""Builds llama.cpp's Vulkan backend (`llama-bench`, with the CPU backend beside it; other tools
such as `llama-perplexity` when asked) from the
llama.cpp source the other benchmarks use (llamacpp_source.py: llama-cpp-python 0.3.36's vendored
llama.cpp) into ~/.cache/localllm/llama-server/build-vulkan/ (LOCALLLM_LLAMA_SERVER_DIR
elsewhere), once, again when the flags change. vulkan_vs_llamacpp.py runs it.

Needs what localllm's own Vulkan build needs (libvulkan-dev, glslc) and the SPIR-V headers'
CMake package (Debian: spirv-headers), which ggml-vulkan finds with find_package. The compiler runs
at the lowest priority (`nice -n 19`); ggml-vulkan's shader generation compiles a few thousand
shader variants with glslc, so the first build takes a while.

One fix, for Vulkan headers that predate VK_EXT_layer_settings (Debian 12's 1.3.239): ggml-vulkan.cpp builds a
`vk::LayerSettingsCreateInfoEXT` (VK_EXT_layer_settings, which such headers do not declare) into its
instance's create info on every build, although it names a layer setting only when built with
GGML_VULKAN_VALIDATE; llama-cpp-python 0.3.16's llama.cpp does not have that code yet, 0.3.17's
does. The fix compiles that code only where the headers declare the extension (they define
`VK_EXT_layer_settings`); elsewhere the instance is created without it, as GGML_VULKAN_VALIDATE-less
builds effectively do anyway. No kernel or dispatch path changes.

    python benchmarks/llamacpp_vulkan_build.py      # prints llama-bench's path
"""
from __future__ import annotations

import os
from pathlib import Path

from llamacpp_source import ROOT, SOURCE_TAG, llama_cpp_source
from llamaserver_build import build_llamacpp_targets

BUILD = ROOT / "build-vulkan"
TARGETS = ["llama-bench"]
FLAGS = ["-DGGML_VULKAN=ON", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
         "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]

HEADERS_FIX_FILE = Path("ggml/src/ggml-vulkan/ggml-vulkan.cpp")
HEADERS_FIX_START = "    VkBool32 enable_best_practice = layer_settings;\n"
HEADERS_FIX_END = ("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
                   "extensions, &layer_setting_info);\n")
HEADERS_FIX_ELSE = ("#else  // localllm: headers without VK_EXT_layer_settings\n"
                    "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
                    "extensions);\n#endif\n")
HEADERS_FIX_TAG = "+vk-layer-settings-headers-fix"


def _apply_headers_fix(llama_cpp: Path) -> None:
    path = llama_cpp / HEADERS_FIX_FILE
    text = path.read_text()
    if HEADERS_FIX_ELSE in text:
        return
    if text.count(HEADERS_FIX_START) != 1 or text.count(HEADERS_FIX_END) != 1:
        raise RuntimeError(f"{path}: the instance creation the headers fix wraps is not there once; "
                           f"is this still the llama.cpp of {SOURCE_TAG}?")
    text = text.replace(HEADERS_FIX_START, "#ifdef VK_EXT_layer_settings\n" + HEADERS_FIX_START)
    path.write_text(text.replace(HEADERS_FIX_END, HEADERS_FIX_END + HEADERS_FIX_ELSE))


def ensure_llamacpp_vulkan(targets: list[str], jobs: int = 2) -> Path:
    """The bin folder of llama.cpp built with ggml's Vulkan backend, holding `targets` (building
    what is missing first)."""
    _apply_headers_fix(llama_cpp_source())
    return build_llamacpp_targets(BUILD, FLAGS, targets, jobs, nice=True, source_tag=SOURCE_TAG + HEADERS_FIX_TAG)


def ensure_llama_bench_vulkan(jobs: int = 2) -> Path:
    """llama-bench built with ggml's Vulkan backend, building it first when needed."""
    return ensure_llamacpp_vulkan(TARGETS, jobs) / "llama-bench"


if __name__ == "__main__":
    print(ensure_llama_bench_vulkan(int(os.environ.get("LOCALLLM_BUILD_JOBS", "2"))))
