#!/usr/bin/env bash
# Builds localllm's portable binary wheel (docs/install.md): `pip wheel .` with LOCALLLM_PORTABLE=ON
# (the core once per CPU level, picked at import), no test harness, no CUDA; then `auditwheel
# repair` gives it the manylinux tag its libraries allow. Writes dist/localllm-*-manylinux_*.whl.
#   scripts/build_wheels.sh [out_dir]     (default: dist; needs a compiler, glslc, the Vulkan headers)
# The wheel is built without link-time optimization (as build/dev is): docs/performance.md's
# portable-vs-native numbers were measured on exactly that code.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$PWD")}
  launcher=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# Its own build folder: a source install's (build/<wheel tag>) is configured for -march=native.
LOCALLLM_PORTABLE=ON LOCALLLM_HARNESS=OFF LOCALLLM_CUDA=OFF LOCALLLM_VULKAN=ON \
  python -m pip wheel . --no-deps -w "$raw" \
    --config-settings=build-dir=build/portable-wheel \
    --config-settings=cmake.define.CMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF "${launcher[@]}"
wheel=$(ls "$raw"/localllm-*.whl)
# Nothing may link the Vulkan loader (the core dlopens it) nor CUDA: the wheel must import on a
# machine with neither.
mkdir "$raw/x" && (cd "$raw/x" && python -m zipfile -e "$wheel" .)
if find "$raw/x" -name '*.so' -exec readelf -d {} + | grep NEEDED | grep -E 'lib(vulkan|cuda|cudart|cublas)'; then
  echo "build_wheels.sh: the lines above: the wheel links Vulkan or CUDA at load time" >&2; exit 1
fi
python -m auditwheel show "$wheel"
mkdir -p "$out"
python -m auditwheel repair "$wheel" -w "$out"
ls -l "$out"/localllm-*.whl
