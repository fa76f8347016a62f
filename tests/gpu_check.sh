#!/usr/bin/env bash
# The GPU check, one call on a lent CUDA machine (an H200, sm_90; no network, no pip): builds
# _core with CUDA, holds every CUDA op to the CPU reference on the same inputs (tests/test_cuda.py),
# times the matmul kernels, runs the CPU kernel tests on that machine's CPU, then the model-level
# hooks that exist so far. Budget: about 8 minutes in all (each step has its own timeout).
#
#   device run:  bash tests/gpu_check.sh        (timeout_s 540; see docs/cuda.md)
#   --models-only: skip the op harness, the timings and the CPU tests (the second call of the
#   two-call model procedure in docs/cuda.md, on the machine the first call built on).
#
# Everything is written to $OUT (default /tmp/gpu_check): gpu_check.log (the whole run),
# cmake.log, build.log, ops.xml (JUnit of the op harness), ops.txt (its per-test results),
# bench.txt (matmul timings), vulkan_agreement.json (where Vulkan runs). The machine's image has numpy, pytest and pybind11; any other
# Python package must be carried in build/pydeps (it is on PYTHONPATH).
set -u -o pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
T0=$(date +%s)
section() { echo; echo "=== $* (t = $(( $(date +%s) - T0 )) s)"; }
export PATH="$PATH:/usr/local/cuda/bin" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/python:$PWD/cli:$PWD/convert:$PWD/build/pydeps"
status=0
MODELS_ONLY=0
[ "${1:-}" = "--models-only" ] && MODELS_ONLY=1

section machine
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -n 2
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) threads"
grep -o -w -E "avx512f|avx512_vnni|avx512vbmi|amx_int8|avx2" /proc/cpuinfo | sort -u | tr "\n" " "; echo
python3 -c "import sys, numpy, pytest, pybind11; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"

section "build with CUDA for sm_90 (and Vulkan where the headers and shaders are here)"
vk_args=()   # the machine's own Vulkan headers and glslc (AUTO), else build/vulkan-kit (tests/vulkan_kit.sh)
if [ -d build/vulkan-kit ] && ! command -v glslc > /dev/null; then
  vk_args=(-DLOCALLLM_VULKAN_INCLUDE_DIR="$PWD/build/vulkan-kit/include" -DLOCALLLM_VULKAN_SPIRV="$PWD/build/vulkan-kit/spirv_blobs.cpp")
fi
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCALLLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOCALLLM_INPLACE=ON -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" "${vk_args[@]}" > "$OUT/cmake.log" 2>&1 \
  || { tail -n 20 "$OUT/cmake.log"; exit 1; }
timeout 300 ninja -C build/gpu > "$OUT/build.log" 2>&1 \
  || { echo "build failed or passed 300 s:"; grep -E -A5 "error|FAILED" "$OUT/build.log" | head -n 60; tail -n 5 "$OUT/build.log"; exit 1; }
grep -i warning "$OUT/build.log" && echo "(build warnings above)"
python3 -c "from localllm import _core; print(_core.cuda_device_count(), 'device(s):', _core.cuda_device_name(0))" || exit 1

if [ $MODELS_ONLY = 0 ]; then
section "op-by-op: CUDA kernels vs the CPU reference (tests/test_cuda.py)"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rA tests/test_cuda.py --junitxml="$OUT/ops.xml" \
  > "$OUT/ops.txt" 2>&1 || status=1
echo "passed: $(grep -c '^PASSED' "$OUT/ops.txt"), skipped: $(grep -c '^SKIPPED' "$OUT/ops.txt")"
grep -E "^(FAILED|ERROR)" "$OUT/ops.txt" | cut -c1-200
grep -E -A25 "^_{5,} " "$OUT/ops.txt" | head -n 80
tail -n 2 "$OUT/ops.txt"

section "matmul kernel timings (benchmarks/cuda_matmul.py)"
timeout 90 python3 benchmarks/cuda_matmul.py --iters 10 | tee "$OUT/bench.txt" || echo "(timings incomplete)"

section "CPU kernels on this machine's CPU"
cpu_tests="tests/test_attention.py"
if python3 -c "import gguf" 2>/dev/null; then cpu_tests="$cpu_tests tests/test_quants.py"
else echo "(no gguf package: carry it in build/pydeps to add tests/test_quants.py)"; fi
timeout 90 python3 -m pytest -q -p no:cacheprovider $cpu_tests 2>&1 | tail -n 3
fi

# ---- Model-level checks. A device call cannot carry the models' cache (64 MiB per call):
# SmolLM2 comes in two calls as two chunks (tests/gpu_model_chunks.py, docs/cuda.md), joined
# here into build/gpu-models once both are on the machine; tests/test_gpu_models.py runs the
# models present in that cache and skips the others.
section "model for the GPU checks"
if [ -d build/gpu-model-a ] && [ -d build/gpu-model-b ]; then
  python3 tests/gpu_model_chunks.py join || status=1
elif [ -d build/gpu-model-a ] || [ -d build/gpu-model-b ]; then
  echo "one chunk of the model is here; the next call carries the other (docs/cuda.md)"
fi
hook() {   # hook NAME COMMAND...
  local name=$1; shift
  section "hook: $name"
  if ! ls build/gpu-models/*.gguf > /dev/null 2>&1; then echo "not run: no model in build/gpu-models"; return; fi
  timeout 300 "$@" || status=1
}
export LOCALLLM_CACHE="$PWD/build/gpu-models"
hook "models at -ngl 0 / half / all: PPL within 0.5% of llama.cpp, top-1 agreement >= 99%, ' Paris.'" \
  python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_models.py -k "perplexity or top1 or paris"
hook "engine on the GPU: 16 sequences, prefix caching, preemption, no leaked blocks, alone = batched" \
  python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_models.py -k engine
hook "plan against the measured device allocation" \
  python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_models.py -k plan
hook "bench -ngl all and half, pp512 / tg128" bash benchmarks/gpu_bench.sh

# ---- The Vulkan backend on the same GPU, where the build has it and the driver offers a GPU.
section "Vulkan"
vk_gpu=$(python3 -c "from localllm import _core
print(next((d['index'] for d in _core.vulkan_devices() if d['usable'] and d['type'] != 'cpu'), '')
      if getattr(_core, 'vulkan_compiled', False) else '')" 2>/dev/null)
if [ -z "$vk_gpu" ]; then
  python3 -c "from localllm import _core; print('not run:', 'no Vulkan backend in this build (no headers/glslc, no build/vulkan-kit)' if not getattr(_core, 'vulkan_compiled', False) else _core.vulkan_unavailable_reason() or 'no Vulkan GPU')"
else
  python3 -m localllm_cli info --devices
  LOCALLLM_REQUIRE_VULKAN=1 timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_vulkan_ops.py \
    tests/test_vulkan_devices.py tests/test_vulkan_kv_quant.py 2>&1 | tail -n 15 || status=1
  hook "models on Vulkan (agreement, perplexity, plan, engine, server)" env LOCALLLM_REQUIRE_VULKAN=1 \
    python3 -m pytest -q -p no:cacheprovider tests/test_vulkan_model.py tests/test_vulkan_engine.py
  hook "submissions on Vulkan: replayed, bounded by dispatches and estimated work, queued back to back" \
    env LOCALLLM_REQUIRE_VULKAN=1 python3 -m pytest -q -p no:cacheprovider tests/test_vulkan_replay.py
  hook "top-1 agreement with the CPU over 200 corpus tokens on Vulkan" python3 benchmarks/vulkan_agreement.py \
    --models smollm2-135m-q4_1 --out "$OUT/vulkan_agreement.json"
  hook "bench on Vulkan -ngl all, pp512 / tg128" python3 -m localllm_cli bench -m "$(ls build/gpu-models/*.gguf | head -n 1)" \
    -p 512 -n 128 -r 2 -ngl all --device "vulkan:$vk_gpu"
fi

section "done: status $status"
exit $status
