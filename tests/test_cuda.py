"""CUDA kernels against the CPU reference, op by op (runs where a GPU is present)."""
import numpy as np
import pytest

from localllm import _core

from conftest import model_file

pytestmark = pytest.mark.skipif(_core.cuda_device_count() == 0, reason="no CUDA device on this machine")


@pytest.mark.parametrize("type_id", [2, 8, 12, 14])   # Q4_0, Q8_0, Q4_K, Q6_K
def test_cuda_dequantize_matches_cpu(type_id):
    from gguf import GGUFReader
    from localllm.quants import dequantize
    rng = np.random.default_rng(type_id)
    reader = GGUFReader(str(model_file("qwen2.5-coder-0.5b-q4_k_m")))
    tensors = [t for t in reader.tensors if int(t.tensor_type) == type_id]
    if tensors:
        raw = np.ascontiguousarray(tensors[0].data).view(np.uint8).reshape(-1)
        n = int(np.prod([int(d) for d in tensors[0].shape]))
    else:   # Q4_0 is not in the real files: random blocks with finite scales
        n = 32 * 1024
        raw = rng.integers(0, 256, size=n // 32 * 18, dtype=np.uint8)
        raw.reshape(-1, 18)[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    cpu = dequantize(raw, type_id, (n,))
    gpu = _core.cuda_dequantize(raw, type_id, n)
    np.testing.assert_array_equal(cpu.reshape(-1), gpu)
