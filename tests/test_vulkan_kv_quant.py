"""A quantized KV cache (q8_0 / q4_0, llama.cpp's --cache-type-k / -v) on Vulkan layers.

The device stores what the CPU's cache stores: each slot's row rotated by llama.cpp's
Walsh-Hadamard sizes and quantized with the CPU's rounding. The stored bytes, read through the
`gguf` package's dequantizers (an independent implementation of the blocks), equal the values the
CPU's cache reads back. Attention over the device's cache matches the CPU's attention over its own
(the query rotated and rounded through q8_0, or kept packed for integer dot products, the output
rotated back), and SmolLM2 with a quantized cache on Vulkan layers agrees with the CPU running the
same cache types. Runs on lavapipe in CI (LOCALLLM_VULKAN_ALLOW_CPU=1) and on any Vulkan device."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from conftest import model_file
from localllm import LLM, _core, _harness
from test_vulkan_model import TEXT, shared_prefix_case, teacher_forced
from vulkan_support import no_validation_messages_in_either_instance, vulkan_device

GGUF_TYPES = {"f16": GGMLQuantizationType.F16, "q8_0": GGMLQuantizationType.Q8_0,
              "q4_0": GGMLQuantizationType.Q4_0}
PAIRS = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16"), ("f16", "q4_0")]


@pytest.fixture(scope="module")
def device() -> int:
    return vulkan_device()


@pytest.fixture(autouse=True)
def no_validation_messages(device):
    with no_validation_messages_in_either_instance():
        yield


def cpu_implementation(device: int) -> bool:
    return _core.vulkan_devices()[device]["type"] == "cpu"


@pytest.mark.parametrize("n_head_kv,hd", [
    (2, 64),     # rotated by 64 (K and V)
    (1, 128),    # K rotated by 128
    (3, 96),     # not rotated (96 % 64): 9 blocks a row, rows that straddle 32-bit words
    (2, 256),    # the widest head
])
@pytest.mark.parametrize("cache_k,cache_v", PAIRS)
def test_the_device_stores_what_the_cpu_cache_stores(device, n_head_kv, hd, cache_k, cache_v):
    _, k, v, pos, seq, tables = shared_prefix_case(n_head_kv, n_head_kv, hd, seed=3)
    k[:, :, 5] *= 30.0   # an outlier channel: what the rotation spreads over the block
    got = _harness.vulkan_kv_bytes(k, v, pos, seq, tables, 8, 16, cache_k, cache_v)
    for side, cache_type in (("k", cache_k), ("v", cache_v)):
        stored = dequantize(got[side], GGUF_TYPES[cache_type]).reshape(got[f"{side}_cpu"].shape)
        ref = got[f"{side}_cpu"]
        assert np.any(ref != 0), side
        if cpu_implementation(device):
            # IEEE division and f16 rounding (lavapipe): the CPU's bytes exactly.
            np.testing.assert_array_equal(stored, ref, err_msg=side)
        else:
            # A GPU may divide to within 2.5 ulp, which can move a rounding: a few values, by a step.
            differ = np.mean(np.any(stored.reshape(-1, 32) != ref.reshape(-1, 32), axis=1))
            assert differ < 0.01, (side, differ)
            np.testing.assert_allclose(stored, ref, atol=0.2 * np.abs(ref).max())


@pytest.mark.parametrize("n_head,n_head_kv,hd,window,softcap", [
    (8, 2, 64, 0, 0.0),       # GQA over rotated K and V
    (6, 2, 128, 20, 0.0),     # sliding window, K rotated by 128
    (6, 3, 96, 0, 0.0),       # no rotation, rows straddling words
    (4, 2, 256, 0, 30.0),     # soft-capping, the widest head
])
@pytest.mark.parametrize("cache_k,cache_v", PAIRS)
def test_attention_over_a_quantized_cache_matches_cpu(n_head, n_head_kv, hd, window, softcap, cache_k, cache_v):
    q, k, v, pos, seq, tables = shared_prefix_case(n_head, n_head_kv, hd)
    rows = np.arange(len(pos), dtype=np.int32)
    scale = 1.0 / np.sqrt(hd)
    ref = _harness.attention_test(q, k, v, pos, seq, tables, 8, 16, rows, scale, window, softcap=softcap,
                                  cache_type_k=cache_k, cache_type_v=cache_v)
    got = _harness.vulkan_attention_test(q, k, v, pos, seq, tables, 8, 16, rows, scale, window, softcap,
                                         cache_k, cache_v)
    # Both read the same stored values with the same prepared queries; only the order of the sums
    # (and the CPU's exp) differ, as with an f16 cache.
    assert float(np.sum((got - ref) ** 2) / np.sum(ref ** 2)) <= 5e-6
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=5e-3)


def test_integer_dot_key_products_match_cpu(device):
    """Where the device has integer dot products and the driver calls them accelerated (or
    LOCALLLM_VULKAN_INT8=1 asks, as here), a quantized K meets the packed q8_0 query through
    OpSDot: the attention cases above, rerun in a process that asks for them."""
    if not _core.vulkan_devices()[device]["features"]["VK_KHR_shader_integer_dot_product"]:
        pytest.skip("the device has no shaderIntegerDotProduct")
    env = {**os.environ, "LOCALLLM_VULKAN_INT8": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                           "attention_over_a_quantized_cache"], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-3000:]


def test_a_quantized_side_needs_whole_blocks_in_a_head():
    q, k, v, pos, seq, tables = shared_prefix_case(4, 2, 48)
    with pytest.raises(ValueError, match="multiple of 32"):
        _harness.vulkan_attention_test(q, k, v, pos, seq, tables, 8, 16, np.arange(4, dtype=np.int32), 0.1,
                                       cache_type_k="q8_0")


@pytest.fixture(scope="module")
def smollm2():
    return str(model_file("smollm2-135m-q4_1"))


@pytest.mark.parametrize("cache_k,cache_v,ngl", [("q8_0", "q8_0", "all"), ("q8_0", "q4_0", 15)])
def test_smollm2_with_a_quantized_cache_on_vulkan_agrees_with_cpu(smollm2, cache_k, cache_v, ngl):
    """Every layer (or half: the other half's cache on the CPU) with the cache on the device,
    against the CPU with the same cache types, teacher-forced; the planner counts the quantized
    cache's bytes."""
    kw = {"n_ctx": 128, "cache_type_k": cache_k, "cache_type_v": cache_v}
    cpu = LLM(smollm2, device="cpu", **kw)
    vk = LLM(smollm2, n_gpu_layers=ngl, device="vulkan", **kw)
    assert vk.plan is not None and vk.plan.gpu_device == "Vulkan"
    f16 = LLM(smollm2, n_ctx=128, n_gpu_layers=ngl, device="vulkan")
    assert vk.plan.devices["Vulkan"].kv < 0.6 * f16.plan.devices["Vulkan"].kv
    agreement, margins = teacher_forced(cpu, vk, TEXT)
    assert agreement >= 0.95 and all(m < 0.5 for m in margins), (agreement, margins)
    out = vk.generate("The capital of France is", max_tokens=2, temperature=0)
    assert out.text.startswith(" Paris"), out.text
