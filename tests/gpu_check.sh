#!/usr/bin/env bash
# The GPU check run on a lent CUDA machine (no network, no models): build with CUDA, then hold
# the CUDA kernels to the CPU reference and run the CPU kernel tests on that machine's CPU too.
# Writes the cmake and build logs under $OUT when set. The device has no gguf package: carry a
# copy of it in build/pydeps (cp -r $(python3 -c 'import gguf,os;print(os.path.dirname(gguf.__file__))') build/pydeps/).
OUT=${OUT:-/tmp}
set -x
nvidia-smi --query-gpu=name --format=csv,noheader
lscpu | grep -o -w -E "avx512f|avx512_vnni|avx512vbmi|amx_int8|avx2" | sort -u | tr "\n" " "; echo
python3 -c "import pybind11, numpy, pytest; print('py ok')"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCALLLM_CUDA=ON -DLOCALLLM_INPLACE=ON -Dpybind11_DIR=$(python3 -m pybind11 --cmakedir) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
ninja -C build/gpu > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
PYTHONPATH=python:cli:convert:build/pydeps timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_kernels.py tests/test_attention.py tests/test_quants.py 2>&1 | tail -15
