#!/usr/bin/env bash
# The portable build checked (docs/install.md). Run from the repository, in a venv with the test
# extra and localllm importable (installed, or PYTHONPATH over an in-place build, which the script
# sets itself when python/localllm holds one):
#   tests/portable_check.sh          the wheel end to end, then the build tree (steps 1-4; it
#                                    compiles the core six times, about 30 minutes on 2 cores)
#   tests/portable_check.sh --tree   the build tree only, with the variants this CPU runs (step 4;
#                                    what .ci/run calls)
#  1. scripts/build_wheels.sh builds the wheel and repairs it to its manylinux tag;
#  2. a fresh venv, with every compiler on PATH replaced by a command that fails, installs it
#     (timed) and runs README's first command with the wheel in place of `pip install .`;
#  3. the same command under qemu-x86_64 -cpu Haswell (AVX2, no AVX-512) gives the same text;
#  4. the portable build tree (LOCALLLM_PORTABLE_BUILD, default build/portable, with the test
#     harness) runs tests/test_portable.py (the variants' instructions, the native logits bit for
#     bit, qemu Nehalem and Haswell) and the kernel tests at every variant and LOCALLLM_ISA level
#     this CPU runs. The full check builds all three variants (the instruction test then reads the
#     ones this CPU cannot run too); --tree only those this CPU runs, as the probe says.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mode=${1:-all}
case "$mode" in all|--tree) ;; *) echo "usage: tests/portable_check.sh [--tree]" >&2; exit 2 ;; esac
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$repo")}
tree=${LOCALLLM_PORTABLE_BUILD:-build/portable}
export LOCALLLM_PORTABLE_BUILD=$tree   # where tests/test_portable.py finds it

wheel_check() {
  echo "+ scripts/build_wheels.sh"
  scripts/build_wheels.sh "$scratch/dist"
  wheel=$(ls "$scratch"/dist/localllm-*manylinux*.whl)

  python3 -m venv "$scratch/venv"
  mkdir "$scratch/no-compiler"
  for tool in cc gcc g++ c++ clang clang++ cmake ninja nvcc; do
    printf '#!/bin/sh\necho "portable_check: %s was called: the wheel must install without a compiler" >&2\nexit 1\n' \
      "$tool" > "$scratch/no-compiler/$tool"
    chmod +x "$scratch/no-compiler/$tool"
  done
  install_cmd=$(python3 tests/readme_commands.py install)
  run_cmd=${install_cmd#pip install . && }   # the localllm commands after the install
  [ "$run_cmd" != "$install_cmd" ] || { echo "README's first command no longer starts with 'pip install . && '" >&2; exit 1; }
  (
    export PATH="$scratch/no-compiler:$scratch/venv/bin:$PATH" CC=false CXX=false
    cd "$scratch"
    start=$(date +%s%N)
    pip install -q "$wheel"
    echo "wheel install: $(( ($(date +%s%N) - start) / 1000000 )) ms (dependencies from pip's cache)"
    echo "+ (fresh venv, no compiler) $run_cmd"
    bash -c "$run_cmd" | tee "$scratch/native.txt"
    echo "+ (qemu-x86_64 -cpu Haswell) $run_cmd"
    # qemu-user runs one program: each `localllm` becomes qemu running the venv's Python on it.
    qemu_cmd=${run_cmd//localllm /qemu-x86_64 -cpu Haswell $scratch/venv/bin/python $scratch/venv/bin/localllm }
    bash -c "$qemu_cmd" | tee "$scratch/haswell.txt"
    diff "$scratch/native.txt" "$scratch/haswell.txt"
  )
}

# Steps 1-3.
[ "$mode" = --tree ] || wheel_check

launcher=()
! command -v ccache >/dev/null || launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
configure() {   # $1: the variants, ;-separated (LOCALLLM_VARIANTS is cached: always named)
  cmake -S . -B "$tree" -G Ninja -DLOCALLLM_PORTABLE=ON -DLOCALLLM_VARIANTS="$1" -DLOCALLLM_CUDA=OFF \
    -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF "${launcher[@]}" \
    -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" >/dev/null
}
variants="baseline;avx2;avx512"
configure "$variants"
if [ "$mode" = --tree ]; then
  # The probe (plain x86-64, no core) says which variants this CPU and OS run: build only those.
  cmake --build "$tree" --target _cpu_probe >/dev/null
  variants=$(python -c 'import sys; sys.path.insert(0, sys.argv[1]); import _cpu_probe
print(";".join(_cpu_probe.runnable_variants()))' "$tree/_variants")
  configure "$variants"
fi
echo "+ $tree: the variants $variants (the test harness included)"
cmake --build "$tree" -j2 >/dev/null
! ls python/localllm/_core*.so >/dev/null 2>&1 || export PYTHONPATH=python:cli:convert
python -m pytest -q -p no:cacheprovider tests/test_portable.py
package="$scratch/package"
mkdir "$package"
cp -r python/localllm "$package/" && rm -rf "$package"/localllm/*.so "$package/localllm/_variants"
cp -r "$tree/_variants" "$package/localllm/"
for variant in $(PYTHONPATH="$package" python -c "import localllm._core_variant as v; print(*v._probe_runnable())"); do
  [ -d "$package/localllm/_variants/$variant" ] || continue
  for level in scalar avx2 avx512; do
    case "$variant:$level" in baseline:avx2|baseline:avx512|avx2:avx512) continue ;; esac
    echo "+ LOCALLLM_VARIANT=$variant LOCALLLM_ISA=$level: kernel tests"
    LOCALLLM_VARIANT=$variant LOCALLLM_ISA=$level PYTHONPATH="$package:tests" \
      python -m pytest -q -p no:cacheprovider -x tests/test_kernels.py tests/test_quants.py
  done
done
echo "portable_check: all passed"
