"""CUDA kernels against the CPU reference, op by op (runs where a GPU is present)."""
import numpy as np
import pytest

from localllm import _core, hub
from localllm.quants import dequantize, row_bytes

pytestmark = pytest.mark.skipif(_core.cuda_device_count() == 0, reason="no CUDA device on this machine")

# type id -> byte offsets of the f16 scale fields inside a block (kept finite in random blocks).
CUDA_TYPES = {
    1: None,               # F16: every element is a field; finite values drawn directly
    2: (0,),               # Q4_0: d
    3: (0, 2),             # Q4_1: d, m
    6: (0,),               # Q5_0: d
    7: (0, 2),             # Q5_1: d, m
    8: (0,),               # Q8_0: d
    12: (0, 2),            # Q4_K: d, dmin
    13: (0, 2),            # Q5_K: d, dmin
    14: (208,),            # Q6_K: d (after ql, qh, scales)
    30: None,              # BF16
}


def random_blocks(type_id: int, n: int, rng) -> np.ndarray:
    """Random bytes of n elements of the type, with finite scale fields (every bit pattern of
    the quants, scales and high bits is exercised)."""
    if type_id == 1:
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if type_id == 30:
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    nbytes = row_bytes(type_id, n)
    raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    block_bytes = row_bytes(type_id, 256 if type_id >= 10 else 32)
    blocks = raw.reshape(-1, block_bytes)
    for off in CUDA_TYPES[type_id]:
        scales = (rng.uniform(-0.05, 0.05, size=len(blocks))).astype(np.float16)
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    return raw


@pytest.mark.parametrize("type_id", sorted(CUDA_TYPES))
def test_cuda_dequantize_random_blocks_match_cpu(type_id):
    rng = np.random.default_rng(type_id)
    n = 256 * 4096
    raw = random_blocks(type_id, n, rng)
    cpu = dequantize(raw, type_id, (n,)).reshape(-1)
    gpu = _core.cuda_dequantize(raw, type_id, n)
    np.testing.assert_array_equal(cpu, gpu)


@pytest.mark.parametrize("model", ["qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m-q4_k_m", "smollm2-135m-q4_1"])
def test_cuda_dequantize_real_tensors_match_cpu(model):
    path = hub.cached_path(model)
    if not path.exists():
        pytest.skip(f"{model} is not in the model cache")
    from localllm.gguf import GGUFFile
    f = GGUFFile(str(path))
    seen = set()
    for t in f.tensors:
        if int(t.type) in CUDA_TYPES and int(t.type) not in seen:
            seen.add(int(t.type))
            raw = np.ascontiguousarray(f.tensor_data(t.name)).view(np.uint8).reshape(-1)
            cpu = dequantize(raw, int(t.type), (t.n_elements,)).reshape(-1)
            np.testing.assert_array_equal(cpu, _core.cuda_dequantize(raw, int(t.type), t.n_elements), err_msg=t.name)
    assert seen


def test_cuda_rejects_bad_input():
    with pytest.raises(ValueError, match="does not match"):
        _core.cuda_dequantize(np.zeros(17, np.uint8), 2, 32)
    with pytest.raises(ValueError):
        _core.cuda_dequantize(np.zeros(16, np.uint8), 9, 32)     # Q8_1: no CUDA kernel
