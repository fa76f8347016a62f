#!/usr/bin/env bash
# The portable wheel end to end (docs/install.md); not part of .ci/run (it compiles the core three
# times, about 30 minutes on 2 cores). Run from the repository, in a venv with the test extra:
#   tests/portable_check.sh
#  1. scripts/build_wheels.sh builds the wheel and repairs it to its manylinux tag;
#  2. a fresh venv, with every compiler on PATH replaced by a command that fails, installs it
#     (timed) and runs README's first command with the wheel in place of `pip install .`;
#  3. the same command under qemu-x86_64 -cpu Haswell (AVX2, no AVX-512) gives the same text;
#  4. the portable build tree (build/portable, with the test harness) runs tests/test_portable.py
#     (the variants' instructions, the native logits bit for bit, qemu Nehalem and Haswell) and the
#     kernel tests at every variant and LOCALLLM_ISA level this CPU runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$repo")}

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

echo "+ build/portable (the test harness included)"
# Every variant named: a tree configured earlier with fewer (LOCALLLM_VARIANTS is cached) is reset.
cmake -S . -B build/portable -G Ninja -DLOCALLLM_PORTABLE=ON -DLOCALLLM_VARIANTS="baseline;avx2;avx512" -DLOCALLLM_CUDA=OFF \
  -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" >/dev/null
cmake --build build/portable -j2 >/dev/null
export PYTHONPATH=python:cli:convert
python -m pytest -q -p no:cacheprovider tests/test_portable.py
package="$scratch/package"
mkdir "$package"
cp -r python/localllm "$package/" && rm -rf "$package"/localllm/*.so "$package/localllm/_variants"
cp -r build/portable/_variants "$package/localllm/"
for variant in $(PYTHONPATH="$package" python -c "import localllm._core_variant as v; print(*v._probe_runnable())"); do
  for level in scalar avx2 avx512; do
    case "$variant:$level" in baseline:avx2|baseline:avx512|avx2:avx512) continue ;; esac
    echo "+ LOCALLLM_VARIANT=$variant LOCALLLM_ISA=$level: kernel tests"
    LOCALLLM_VARIANT=$variant LOCALLLM_ISA=$level PYTHONPATH="$package:tests" \
      python -m pytest -q -p no:cacheprovider -x tests/test_kernels.py tests/test_quants.py
  done
done
echo "portable_check: all passed"
