#!/usr/bin/env bash
# Prepares build/vulkan-kit on this machine for tests/gpu_check.sh on a lent GPU machine whose
# image has a Vulkan driver but neither the Vulkan headers nor glslc: the headers (Debian's
# libvulkan-dev) and the shaders this build compiled (its generated spirv_blobs.cpp). Carry the
# folder with the device call (`carry: ["build/vulkan-kit"]`); gpu_check.sh then builds the
# Vulkan backend from it. Usage: bash tests/vulkan_kit.sh [BUILD_DIR]   (default build/dev)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
blobs="$build/vulkan/spirv_blobs.cpp"
[ -f "$blobs" ] || { echo "no $blobs: build with the Vulkan backend first (glslc, libvulkan-dev)" >&2; exit 1; }
kit=build/vulkan-kit
rm -rf "$kit" && mkdir -p "$kit/include"
mkdir -p "$kit/include/vulkan"
cp /usr/include/vulkan/*.h "$kit/include/vulkan/"   # the C headers only (not vulkan.hpp's)
[ -d /usr/include/vk_video ] && cp -r /usr/include/vk_video "$kit/include/"
cp "$blobs" "$kit/spirv_blobs.cpp"
du -sh "$kit"
