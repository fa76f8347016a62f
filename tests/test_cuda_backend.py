"""The CUDA backend's side that runs without a GPU: the planner's CUDA byte rule (footprint.cpp)
against the rule restated here from the GGUF file itself (read with the `gguf` package), and the
clear answers a build gives when no GPU is there. The forward on a GPU: tests/test_gpu_models.py."""
from __future__ import annotations

import functools

import gguf
import numpy as np
import pytest

from conftest import MODEL_KEYS, model_file
from localllm import LLM, _core

BS = 16
WEIGHT_ALIGN = 256          # docs/cuda.md: each weight in the device arena starts 256-byte aligned
DECODE_ROWS = 8             # the decode matmul's q8_1 activations: at most 8 rows
Q8_1_BLOCK = 36             # bytes per 32 activations (two halves and 32 int8)


def _field(r: gguf.GGUFReader, suffix: str, default=None):
    for name, f in r.fields.items():
        if name.endswith(suffix):
            return int(f.parts[-1][0])
    return default


@functools.cache
def _file_facts(path) -> tuple:
    r = gguf.GGUFReader(str(path))
    n_layer = _field(r, ".block_count")
    n_embd, n_ff = _field(r, ".embedding_length"), _field(r, ".feed_forward_length")
    n_head, n_head_kv = _field(r, ".attention.head_count"), _field(r, ".attention.head_count_kv")
    head_dim = _field(r, ".attention.key_length", n_embd // n_head)
    rope_dims = _field(r, ".rope.dimension_count", head_dim)
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    tensors = {t.name: int(t.n_bytes) for t in r.tensors}
    return n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, rope_dims, n_vocab, tensors


def cuda_rule(path, n_gpu: int, kv_blocks: int, T: int) -> dict[str, int]:
    """What the GPU holds for the last n_gpu layers and the output head, from the file."""
    n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, rope_dims, n_vocab, tensors = _file_facts(path)
    gpu_layers = range(n_layer - n_gpu, n_layer)
    names = [n for n in tensors if n.startswith("blk.") and int(n.split(".")[1]) in gpu_layers]
    names += ["output_norm.weight", "output.weight" if "output.weight" in tensors else "token_embd.weight"]
    weights = sum(-(-tensors[n] // WEIGHT_ALIGN) * WEIGHT_ALIGN for n in names)
    q_width, kv_width = n_head * head_dim, n_head_kv * head_dim
    acts = T * (3 * n_embd + 2 * q_width + 2 * kv_width + 2 * n_ff) * 4
    widest = max(n_embd, q_width, n_ff)
    scratch = (acts + T * n_vocab * 4 + 2 * T * rope_dims * 4 + min(T, DECODE_ROWS) * -(-widest // 32) * Q8_1_BLOCK
               + 5 * T * 4)
    kv = n_gpu * 2 * kv_blocks * BS * kv_width * 2
    return {"weights": weights, "kv": kv, "scratch": scratch}


@pytest.mark.parametrize("key", MODEL_KEYS)
def test_cuda_footprint_is_the_documented_rule(key):
    path = model_file(key)
    fp = _core.Footprint(str(path))
    for n_gpu in (1, fp.n_layer // 2, fp.n_layer):
        for T in (1, 7, 512):
            got = fp.bytes(n_gpu, 65, BS, T)["CUDA"]
            assert dict(got) == cuda_rule(path, n_gpu, 65, T), (n_gpu, T)


def test_cuda_free_memory_without_a_gpu_is_zero():
    if _core.cuda_device_count() > 0:
        pytest.skip("a GPU is present")
    assert _core.cuda_free_memory() == 0


@pytest.mark.skipif(not _core.backend_compiled("CUDA"), reason="this build has no CUDA backend")
def test_cuda_backend_without_a_device_is_a_clear_error():
    if _core.cuda_device_count() > 0:
        pytest.skip("a GPU is present")
    path = str(model_file("smollm2-135m-q4_1"))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        _core.Model(path, 1, 8, BS, "fast", 2)
    # auto plans no GPU layer and runs on the CPU
    llm = LLM(path, n_ctx=64, n_batch=16, n_gpu_layers="auto")
    assert llm.n_gpu_layers == 0 and llm._model.layer_devices == ["CPU"] * 30
    toks = np.arange(4, dtype=np.int32)
    logits = llm._model.forward(toks, np.arange(4, dtype=np.int32), np.zeros(4, np.int32),
                                np.array([[1]], np.int32), np.array([3], np.int32))
    assert np.all(np.isfinite(logits))
