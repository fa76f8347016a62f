"""Inputs and the error measure of the CUDA checks, shared by tests/test_cuda.py (on a GPU) and
tests/cuda_host_check.py (the CUDA build's host twins, no GPU). `core` is the _core module to
quantize with: the host check runs against a CUDA build loaded as a top-level module, beside
which localllm's own _core cannot be imported (pybind11 would register its classes twice)."""
import numpy as np

NMSE_MAX = 5e-4   # llama.cpp's test-backend-ops bound for these float ops

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
MATMUL_TYPES = [0, 1, 30, 2, 3, 6, 7, 8, 12, 13, 14]   # F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K


def nmse(got, ref) -> float:
    """Normalized mean squared error of got against ref."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.sum((got - ref) ** 2) / max(np.sum(ref ** 2), 1e-30))


def row_bytes(core, type_id: int, n: int) -> int:
    info = core.type_info(type_id)
    return n // info["block_elems"] * info["block_bytes"]


def random_blocks(core, type_id: int, n: int, rng) -> np.ndarray:
    """Random bytes of n elements of the type, with finite scale fields (every bit pattern of
    the quants, scales and high bits is exercised)."""
    if type_id == 1:
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if type_id == 30:
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, size=row_bytes(core, type_id, n), dtype=np.uint8)
    blocks = raw.reshape(-1, row_bytes(core, type_id, core.type_info(type_id)["block_elems"]))
    for off in CUDA_TYPES[type_id]:
        scales = (rng.uniform(-0.05, 0.05, size=len(blocks))).astype(np.float16)
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    return raw


def weight_bytes(core, type_id: int, w: np.ndarray) -> np.ndarray:
    """GGUF rows of a float matrix in the given type (raw bytes)."""
    if type_id == 0:
        return np.ascontiguousarray(w, np.float32).view(np.uint8).reshape(-1)
    return np.ascontiguousarray(core.quantize(np.ascontiguousarray(w, np.float32), type_id)).view(np.uint8).reshape(-1)
