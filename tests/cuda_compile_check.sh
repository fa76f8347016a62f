#!/usr/bin/env bash
# Compile-only check of the CUDA sources on a machine with no GPU (CI): installs the CUDA 13
# compiler, runtime and headers published on PyPI (nvidia-cuda-nvcc, -runtime, -cccl; nvcc lands
# in nvidia/cu13/bin) into build/cuda-wheels, builds _core with LOCALLLM_CUDA=ON for sm_90 into
# its own build dir, then checks that this CUDA build imports and runs its CPU path here (the
# static CUDA runtime finds no driver: 0 devices, and a GPU op or a GPU layer is a clear error),
# and runs the kernels' per-type code on the host against the CPU reference
# (tests/cuda_host_check.py).
# Exit status 3: the wheels could not be installed (no registry): nothing was checked.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${LOCALLLM_CUDA_WHEELS:-build/cuda-wheels}
BUILD=${LOCALLLM_CUDA_BUILD:-build/cuda-compile}
TK="$WHEELS/nvidia/cu13"
start=$(date +%s)
if [ ! -x "$TK/bin/nvcc" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$WHEELS" \
    "nvidia-cuda-nvcc>=13,<14" "nvidia-cuda-runtime>=13,<14" "nvidia-cuda-cccl>=13,<14" || exit 3
fi
"$TK/bin/nvcc" --version | tail -n 2
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCALLLM_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$PWD/$TK/bin/nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" > "$BUILD.cmake.log" 2>&1 || { tail -n 30 "$BUILD.cmake.log"; exit 1; }
ninja -C "$BUILD" > "$BUILD.build.log" 2>&1 || { grep -E -A5 "error|FAILED" "$BUILD.build.log" | head -n 60; exit 1; }
if grep -E -i "warning" "$BUILD.build.log"; then echo "the CUDA build has warnings (above)"; exit 1; fi
PYTHONPATH="$BUILD" python3 - <<'PY'
import numpy as np
import _core
import _harness
n = _core.cuda_device_count()
x = np.arange(64, dtype=np.float32)
assert np.all(np.isfinite(_harness.rms_norm(x, np.ones(64, np.float32), 1e-6)))   # the CPU path runs
if n == 0:
    try:
        _harness.cuda_dequantize(np.zeros(18, np.uint8), 2, 32)
    except RuntimeError as e:
        assert "no CUDA device" in str(e), e
    else:
        raise AssertionError("a GPU op without a GPU did not raise")
assert _core.backend_compiled("CUDA")
if n == 0:
    assert _core.cuda_free_memory() == 0
    import os
    smol = os.path.expanduser("~/.cache/localllm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(smol):   # the CUDA backend asked for with no device: a clear error
        try:
            _core.Model(smol, 1, 8, 16, "fast", 2)
        except RuntimeError as e:
            assert "CUDA backend: no CUDA device" in str(e), e
        else:
            raise AssertionError("a CUDA layer without a GPU did not raise")
print(f"CUDA build imports, with the CUDA backend; {n} CUDA device(s)")
PY
# the kernels' per-type arithmetic, run on the host by this build, against the CPU reference
PYTHONPATH="$BUILD" python3 tests/cuda_host_check.py
echo "cuda compile check passed in $(( $(date +%s) - start )) s"
