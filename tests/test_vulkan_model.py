"""The Vulkan backend behind backend.h (csrc/backends/vulkan/backend_vulkan.cpp): its paged
attention against the CPU's on the same cache contents, and SmolLM2 with -ngl on Vulkan against
the CPU backend. Runs on any usable Vulkan device; on lavapipe (a CPU implementation, admitted
by LOCALLLM_VULKAN_ALLOW_CPU=1) the kernels are slow, so the token counts stay small. With
LOCALLLM_VULKAN_VALIDATE=1 any validation message fails the test that caused it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import model_file
from localllm import LLM, _core, _harness
from vulkan_support import no_validation_messages_in_either_instance, vulkan_device

PROMPT = "The capital of France is"
# Teacher-forced text: long enough to cover two 16-slot KV blocks, short enough for lavapipe.
TEXT = "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre and its food."


@pytest.fixture(scope="module")
def device() -> int:
    return vulkan_device()


def validating() -> bool:
    return os.environ.get("LOCALLLM_VULKAN_VALIDATE", "") not in ("", "0")


@pytest.fixture(autouse=True)
def no_validation_messages(device):
    with no_validation_messages_in_either_instance():
        yield


# ---- attention ----

def shared_prefix_case(n_head: int, n_head_kv: int, hd: int, seed: int = 0):
    """Two sequences over a 16-slot paged cache: sequence 0 writes 40 tokens (blocks 5, 2, 7);
    sequence 1 shares its first two blocks (a common prefix) and writes only positions 32-43 into
    its own blocks 4 and 0. Every token queries."""
    rng = np.random.default_rng(seed)
    pos = np.concatenate([np.arange(40), np.arange(32, 44)]).astype(np.int32)
    seq = np.concatenate([np.zeros(40), np.ones(12)]).astype(np.int32)
    tables = np.array([[5, 2, 7], [5, 2, 4]], np.int32)
    T = len(pos)
    q, k, v = (rng.standard_normal((T, h, hd)).astype(np.float32) * 1.5 for h in (n_head, n_head_kv, n_head_kv))
    return q, k, v, pos, seq, tables


@pytest.mark.parametrize("n_head,n_head_kv,hd,window,softcap", [
    (4, 4, 64, 0, 0.0),       # plain multi-head
    (8, 2, 64, 0, 0.0),       # GQA, 4 query heads per kv head
    (6, 2, 128, 20, 0.0),     # sliding window (Gemma 3's local layers)
    (4, 2, 256, 0, 30.0),     # Gemma 2's soft-capping, the widest head
])
def test_attention_matches_cpu_over_shared_blocks(n_head, n_head_kv, hd, window, softcap):
    q, k, v, pos, seq, tables = shared_prefix_case(n_head, n_head_kv, hd)
    rows = np.arange(len(pos), dtype=np.int32)
    scale = 1.0 / np.sqrt(hd)
    ref = _harness.attention_test(q, k, v, pos, seq, tables, 8, 16, rows, scale, window, softcap=softcap)
    got = _harness.vulkan_attention_test(q, k, v, pos, seq, tables, 8, 16, rows, scale, window, softcap)
    # Both read the same F16 keys and values; only the float order of the sums differs.
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)


def test_attention_decode_rows_match_cpu():
    q, k, v, pos, seq, tables = shared_prefix_case(8, 2, 64, seed=1)
    rows = np.array([39, 51], np.int32)   # the last token of each sequence: a decode step
    ref = _harness.attention_test(q, k, v, pos, seq, tables, 8, 16, rows, 0.125)
    got = _harness.vulkan_attention_test(q, k, v, pos, seq, tables, 8, 16, rows, 0.125)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)


def test_attention_rejects_a_block_outside_the_cache():
    q, k, v, pos, seq, tables = shared_prefix_case(4, 4, 64)
    with pytest.raises(ValueError, match="block id out of range"):
        _harness.vulkan_attention_test(q, k, v, pos, seq, tables, 6, 16, np.arange(4, dtype=np.int32), 0.125)


# ---- SmolLM2 on Vulkan ----

@pytest.fixture(scope="module")
def smollm2():
    return str(model_file("smollm2-135m-q4_1"))


@pytest.fixture(scope="module")
def cpu_llm(smollm2):
    return LLM(smollm2, n_ctx=128, device="cpu")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "localllm_cli", "run", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc


def teacher_forced(cpu: LLM, vk: LLM, text: str) -> tuple[float, list[float]]:
    """Top-1 agreement of the two over every position of text, and the CPU's top-1/top-2 margin
    at each position where they disagree."""
    ids = cpu.tokenize(text)
    lc, lv = cpu.logits(ids), vk.logits(ids)
    top_c, top_v = lc.argmax(-1), lv.argmax(-1)
    margins = []
    for r in np.flatnonzero(top_c != top_v):
        two = np.sort(lc[r])[-2:]
        margins.append(float(two[1] - two[0]))
    return float((top_c == top_v).mean()), margins


@pytest.mark.parametrize("int8,tiled", [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")])
def test_greedy_run_with_every_layer_on_vulkan(smollm2, int8, tiled):
    """`localllm run --device vulkan -ngl all` against the CPU's greedy output, with the float
    kernels and with the integer-dot ones (LOCALLLM_VULKAN_INT8=1: SmolLM2's Q4_1 and Q8_0
    matrices), the prompt through the matrix-vector kernels 4 tokens at a time as lavapipe runs it
    and through the tiled kernels as a GPU does (LOCALLLM_VULKAN_TILED=1); where they part, the
    token they part at must be a near tie on the CPU (a float difference, not a wrong layer)."""
    args = ("-m", smollm2, "-p", PROMPT, "-n", "8", "--temp", "0", "-c", "128")
    cpu = run_cli(*args, "--device", "cpu").stdout
    vk = run_cli(*args, "-ngl", "all", "--device", "vulkan",
                 env={"LOCALLLM_VULKAN_INT8": int8, "LOCALLLM_VULKAN_TILED": tiled}).stdout
    assert vk.startswith(" Paris"), vk
    if vk != cpu:
        llm = LLM(smollm2, n_ctx=128, device="cpu")
        ids_c, ids_v = llm.tokenize(PROMPT + cpu), llm.tokenize(PROMPT + vk)
        k = next(i for i, (a, b) in enumerate(zip(ids_c, ids_v)) if a != b)   # the first token they part at
        row = llm.logits(ids_c, rows=[k - 1])[0]
        margin = float(row[ids_c[k]] - row[ids_v[k]])
        assert margin < 0.5, f"CPU {cpu!r} vs Vulkan {vk!r} part where the CPU prefers its token by {margin}"


LOGITS_CODE = ("import sys, numpy as np; from localllm import LLM; "
               "llm = LLM(sys.argv[1], n_ctx=64, n_batch=64, n_gpu_layers='all', device='vulkan'); "
               "sys.stdout.buffer.write(np.ascontiguousarray(llm.logits(llm.tokenize(sys.argv[2])), np.float32).tobytes())")


@pytest.mark.parametrize("int8", ["0", "1"])
def test_prompt_logits_are_the_same_bits_through_either_kernel(smollm2, int8):
    """Batch invariance on the device: a prompt through the matrix-vector kernels 4 tokens at a
    time (lavapipe's way, and every decode step's) and through the tiled kernels in one batch (a
    GPU's way, LOCALLLM_VULKAN_TILED=1) gives the same logits bit for bit, so a sequence's tokens
    do not depend on the batch or prefix-cache hit that cut its prompt."""
    out = [subprocess.run([sys.executable, "-c", LOGITS_CODE, smollm2, PROMPT], capture_output=True, check=True,
                          timeout=600, env={**os.environ, "LOCALLLM_VULKAN_INT8": int8, "LOCALLLM_VULKAN_TILED": tiled}
                          ).stdout for tiled in ("0", "1")]
    assert len(out[0]) > 0 and out[0] == out[1]


@pytest.mark.parametrize("ngl", ["all", 15])
def test_teacher_forced_agreement_with_cpu(smollm2, cpu_llm, ngl):
    vk = LLM(smollm2, n_ctx=128, n_gpu_layers=ngl, device="vulkan")
    assert vk.plan is not None and vk.plan.gpu_device == "Vulkan"
    assert vk.n_gpu_layers == (30 if ngl == "all" else ngl)
    agreement, margins = teacher_forced(cpu_llm, vk, TEXT)
    assert agreement >= 0.95 and all(m < 0.5 for m in margins), (agreement, margins)


def test_device_strings_resolve_through_the_registry():
    """'Vulkan' names the backend's default device (lavapipe here: named, a CPU implementation
    counts), 'Vulkan:N' a listed one; the automatic choice never takes a CPU implementation."""
    listed = _core.vulkan_devices()
    name, number = _core.resolve_device("Vulkan")
    assert name == "Vulkan" and 0 <= number < len(listed) and listed[number]["usable"]
    assert _core.resolve_device(f"Vulkan:{number}") == ("Vulkan", number)
    assert _core.vulkan_device_count() == len(listed) and _core.vulkan_free_memory(number) > 0
    assert _core.vulkan_device_name(number) == listed[number]["name"]
    if all(d["type"] == "cpu" for d in listed):
        assert _core.resolve_device("")[0] != "Vulkan" or _core.resolve_device("")[1] == -1
    with pytest.raises(ValueError, match="no device backend called 'CPU'"):
        _core.resolve_device("CPU")
    with pytest.raises(ValueError, match="device number"):
        _core.resolve_device("Vulkan:x")


def test_each_model_keeps_its_own_device(smollm2):
    """The device is the model's, not the process's: a Vulkan model, then a CPU one, then the
    Vulkan one again runs on Vulkan (its logits unchanged)."""
    number = _core.resolve_device("Vulkan")[1]
    vk = LLM(smollm2, n_ctx=64, n_gpu_layers=2, device=f"vulkan:{number}")
    ids = vk.tokenize("The capital of France is")
    before = vk.logits(ids)
    cpu = LLM(smollm2, n_ctx=64, device="cpu")
    assert cpu._model.allocated.keys() == {"CPU"}
    assert set(vk._model.allocated) == {"CPU", "Vulkan"}
    np.testing.assert_array_equal(vk.logits(ids), before)


def test_a_missing_device_number_is_named(smollm2):
    with pytest.raises(ValueError, match=r"no Vulkan device 7\b.*found"):
        LLM(smollm2, n_ctx=64, n_gpu_layers=1, device="vulkan:7")
    with pytest.raises(ValueError, match="device must be one of"):
        LLM(smollm2, n_ctx=64, n_gpu_layers=1, device="vulkan:")
    with pytest.raises(ValueError, match="device must be one of"):
        LLM(smollm2, n_ctx=64, device="cpu:0")


def test_qwen_output_head_over_one_buffer_runs_in_row_windows():
    """Qwen2.5-Coder 0.5B: q/k/v biases, and an output.weight (138 MiB) over lavapipe's 128 MiB
    storage-buffer range, held as two row windows. -ngl 2 keeps the test short."""
    path = str(model_file("qwen2.5-coder-0.5b-q4_k_m"))
    cpu = LLM(path, n_ctx=64, n_batch=16, device="cpu")
    vk = LLM(path, n_ctx=64, n_batch=16, n_gpu_layers=2, device="vulkan")
    agreement, margins = teacher_forced(cpu, vk, "def add(a, b):")
    assert agreement >= 0.95 and all(m < 0.5 for m in margins), (agreement, margins)


def test_gemma3_sliding_window_layers_on_vulkan():
    """Gemma 3 270M's last 6 layers (five sliding-window layers and a global one, two rope bases,
    GELU, q/k norms) and its tied 262k-row output head (row windows) on Vulkan. Its logits have
    near ties (CPU top-1/top-2 margins of 0.1 on this text), so a flip there is a float difference."""
    path = str(model_file("gemma3-270m-q4_k_m"))
    cpu = LLM(path, n_ctx=64, n_batch=16, device="cpu")
    vk = LLM(path, n_ctx=64, n_batch=16, n_gpu_layers=6, device="vulkan")
    agreement, margins = teacher_forced(cpu, vk, "The capital of France is Paris, and")
    assert agreement >= 0.75 and all(m < 0.5 for m in margins), (agreement, margins)


@pytest.mark.parametrize("key", ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"])
def test_plan_equals_the_device_memory_allocated(key):
    """The planner's Vulkan bytes (weights, KV, scratch for a full batch) against the device memory
    the driver gave the model's buffers after a full batch ran: within 1%."""
    n_batch = 16
    vk = LLM(str(model_file(key)), n_ctx=64, n_batch=n_batch, n_gpu_layers="all", device="vulkan")
    vk.logits(list(range(1, n_batch + 1)))
    planned = vk.plan.devices["Vulkan"].total
    measured = vk._model.device_memory["Vulkan"]
    assert abs(measured - planned) <= 0.01 * planned, (planned, measured, vk._model.allocated["Vulkan"])


def test_perplexity_within_the_cpu_numerics_band(smollm2):
    """Perplexity on a slice of the corpus (2 chunks of 64 tokens: lavapipe is a CPU) with half
    the layers and the output head on Vulkan. On so few tokens, rounding alone moves perplexity by
    percents: the CPU's own two numerics (fast and llama.cpp's order) differ by 3.3% here. So the
    Vulkan figure must lie within that band widened by 0.5%."""
    from localllm.perplexity import perplexity
    text = (Path(__file__).parent / "data" / "corpus" / "gpl-3.txt").read_text(encoding="utf-8")[:4000]
    cpu = [perplexity(LLM(smollm2, n_ctx=64, device="cpu", numerics=n), text, 64, max_chunks=2).ppl
           for n in ("fast", "llama.cpp")]
    vk = perplexity(LLM(smollm2, n_ctx=64, n_gpu_layers=15, device="vulkan"), text, 64, max_chunks=2).ppl
    assert min(cpu) * 0.995 <= vk <= max(cpu) * 1.005, (cpu, vk)


def test_a_device_that_fills_up_names_the_tensor(smollm2):
    """A device whose memory runs out mid-load (LOCALLLM_VULKAN_BUDGET caps it at 40 MB, under
    the model's weights) is an error naming the tensor and its size, never a crash."""
    proc = subprocess.run([sys.executable, "-m", "localllm_cli", "run", "-m", smollm2, "-p", "Hi", "-n", "1",
                           "-c", "64", "-ngl", "all", "--device", "vulkan"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "LOCALLLM_VULKAN_BUDGET": "40000000"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "Vulkan out of memory: " in proc.stderr and "(weights) needs" in proc.stderr, proc.stderr
