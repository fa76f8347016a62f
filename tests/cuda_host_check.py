"""The CUDA kernels' per-type code (cuda/quant_formats.cuh) run on the host by a CUDA build of
_core, against the CPU reference: dequantization exact, the decode path's int8 arithmetic
within a normalized MSE of 5e-4 of the CPU matmul. Needs no GPU: tests/cuda_compile_check.sh runs
it against the build it just made (python3 tests/cuda_host_check.py, that build on sys.path).
Random blocks exercise every bit pattern of the quants, scales and high bits."""
import sys

import numpy as np

import _core
import _harness

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from cuda_blocks import CUDA_TYPES, MATMUL_TYPES, NMSE_MAX, nmse, random_blocks, weight_bytes  # noqa: E402


def dequantize_cpu(raw, type_id, n):
    return _core.dequantize(raw, type_id, n).reshape(-1)


def main() -> None:
    rng = np.random.default_rng(0)
    for type_id in sorted(CUDA_TYPES):
        n = 256 * 64
        raw = random_blocks(_core, type_id, n, rng)
        np.testing.assert_array_equal(_harness.cuda_host_dequantize(raw, type_id, n), dequantize_cpu(raw, type_id, n),
                                      err_msg=f"type {type_id}")
    for type_id in MATMUL_TYPES:
        N, K = 48, 768
        for name, w in (("quantized normal values", weight_bytes(_core, type_id, rng.standard_normal((N, K)).astype(np.float32))),
                        ("random blocks", random_blocks(_core, type_id, N * K, rng) if type_id in CUDA_TYPES else None)):
            if w is None:
                continue
            x = rng.standard_normal((3, K)).astype(np.float32)
            err = nmse(_harness.cuda_host_decode_matmul(w, type_id, N, K, x), _harness.matmul(w, type_id, N, K, x))
            assert err <= NMSE_MAX, (type_id, name, err)
    print(f"host check of the CUDA formats passed: {len(CUDA_TYPES)} dequantizations exact, "
          f"{len(MATMUL_TYPES)} decode-path types within NMSE {NMSE_MAX}")


if __name__ == "__main__":
    main()
