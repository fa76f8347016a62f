"""The forward on the GPU (CudaBackend) with the real models, at -ngl 0, half and all: perplexity
against llama.cpp's, teacher-forced top-1 agreement with the CPU, greedy " Paris.", the engine
with 16 sequences on the GPU, and the plan against what loading allocates on the device.

Skips cleanly without a CUDA backend, without a GPU, or for a model that is not in the cache (a
device call carries only SmolLM2, in two chunks: tests/gpu_model_chunks.py, docs/cuda.md). Run
by tests/gpu_check.sh on a lent GPU machine."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from conftest import CORPUS, REPO, f16_perplexity_rows
from localllm import LLM, _core, hub
from localllm.engine import Engine
from localllm.plan import plan_layers
from localllm.sampling import SamplingParams

pytestmark = pytest.mark.skipif(not _core.backend_compiled("CUDA") or _core.cuda_device_count() == 0,
                                reason="needs a build with the CUDA backend and a GPU")

BS = 16


def cached_models() -> list[str]:
    """The known models already in the cache (a GPU machine cannot pull)."""
    return [k for k in hub.KNOWN_MODELS if hub.cached_path(k).exists()]


MODELS = cached_models()


def path_of(key: str) -> str:
    return str(hub.cached_path(key))


def n_layer_of(key: str) -> int:
    return _core.Footprint(path_of(key)).n_layer


def ngl_values(key: str) -> list[int]:
    n = n_layer_of(key)
    return [0, n // 2, n]


_LLMS: dict = {}


def llm_at(key: str, ngl: int) -> LLM:
    if (key, ngl) not in _LLMS:
        _LLMS[(key, ngl)] = LLM(path_of(key), n_ctx=1024, seed=0, n_gpu_layers=ngl)
    return _LLMS[(key, ngl)]


def _ppl_cases():
    return [(r["model"], ngl, r["ppl"]) for r in f16_perplexity_rows() if r["n_ctx"] == 512 and r["model"] in MODELS
            for ngl in ngl_values(r["model"])]


@pytest.mark.parametrize("key,ngl,ref_ppl", _ppl_cases())
def test_perplexity_within_half_a_percent_of_llamacpp(key, ngl, ref_ppl):
    from localllm.perplexity import perplexity
    llm = llm_at(key, ngl)
    assert llm._model.layer_devices.count("CUDA") == ngl
    res = perplexity(llm, CORPUS.read_text(encoding="utf-8"), 512)
    print(f"{key} -ngl {ngl}: PPL {res.ppl:.4f} (llama.cpp {ref_ppl})")
    assert math.isclose(res.ppl, ref_ppl, rel_tol=0.005)


@pytest.mark.parametrize("key", MODELS)
def test_top1_agreement_with_the_cpu(key):
    ids = llm_at(key, 0).tokenize(CORPUS.read_text(encoding="utf-8"))[:1000]
    cpu = llm_at(key, 0).logits(ids).argmax(axis=1)
    for ngl in ngl_values(key)[1:]:
        gpu = llm_at(key, ngl).logits(ids).argmax(axis=1)
        agree = float(np.mean(gpu == cpu))
        print(f"{key} -ngl {ngl}: top-1 agreement with the CPU {agree:.4f} over {len(ids)} tokens")
        assert agree >= 0.99


@pytest.mark.parametrize("key", MODELS)
def test_cli_run_says_paris_on_the_gpu(key):
    out = subprocess.run([sys.executable, "-m", "localllm_cli", "run", "-m", path_of(key), "-p",
                          "The capital of France is", "-n", "20", "--temp", "0", "-ngl", "all"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert " Paris." in out.stdout, out.stdout


@pytest.mark.parametrize("key", MODELS[:1])
def test_engine_on_the_gpu_16_sequences(key):
    """Shared prefixes (prefix caching), a pool too small for all (preemption), then no block
    referenced, and each sequence's tokens equal to it run alone."""
    llm = llm_at(key, 0)
    tok = llm.tokenizer
    n_layer = n_layer_of(key)

    def engine(kv_blocks: int, max_running: int) -> Engine:
        model = _core.Model(path_of(key), 2, kv_blocks, BS, "fast", n_layer)
        return Engine(model, tok, n_ctx=1024, max_batch_tokens=256, max_running=max_running)

    rng = np.random.default_rng(0)
    shared = [int(t) for t in rng.integers(0, 1000, 40)]
    prompts = [shared + [int(t) for t in rng.integers(0, 1000, int(rng.integers(1, 30)))] for _ in range(16)]
    params = SamplingParams(max_tokens=24, temperature=0.0)
    eng = engine(kv_blocks=40, max_running=16)
    rids = [eng.submit(p, params) for p in prompts]
    batched = {r: [t for o in eng.outputs(r) for t in o.token_ids] for r in rids}
    assert eng.stats.preemptions > 0 and eng.pool.stats.hit_blocks > 0
    assert eng.pool.num_used == 0 and eng.pool.num_free == eng.pool.capacity
    alone = engine(kv_blocks=64, max_running=1)
    for r, p in list(zip(rids, prompts))[:4]:
        solo = alone.submit(p, params)
        assert [t for o in alone.outputs(solo) for t in o.token_ids] == batched[r]


@pytest.mark.parametrize("key", MODELS)
def test_plan_equals_the_device_allocation(key):
    """The tracked allocation equals the plan exactly, and the device's free memory drops by it
    within 1%, plus the CUDA allocator's rounding of each allocation (up to 2 MiB each: the
    weight arena, a KV buffer per layer, five scratch buffers and the block tables)."""
    fp = _core.Footprint(path_of(key))
    n_batch = 256
    p = plan_layers(fp.bytes, fp.n_layer, "all", n_ctx=1024, kv_block_size=BS, n_batch=n_batch, ctx_set=True,
                    gpu_free=int(_core.cuda_free_memory()))
    free_before = _core.cuda_mem_info()[0]
    m = _core.Model(path_of(key), 2, p.kv_blocks, BS, "fast", p.n_gpu_layers)
    m.reserve(n_batch)
    used = free_before - _core.cuda_mem_info()[0]
    gpu = p.devices["CUDA"]
    assert m.allocated["CUDA"] == {"weights": gpu.weights, "kv": gpu.kv, "scratch": gpu.scratch}
    print(f"{key}: planned {gpu.total:,} B on the GPU, free memory dropped by {used:,} B")
    n_allocations = 1 + p.n_gpu_layers + 5 + 1
    assert abs(used - gpu.total) <= 0.01 * gpu.total + n_allocations * (2 << 20)


@pytest.mark.skipif(not MODELS, reason="no model in the cache")
def test_a_quantized_cache_stays_off_cuda_layers():
    """CUDA's attention reads an f16 cache: a quantized one with CUDA layers is a named error,
    and "auto" keeps it on the CPU."""
    path = path_of(MODELS[0])
    with pytest.raises(ValueError, match="q8_0/q8_0 KV cache does not run on CUDA"):
        LLM(path, n_ctx=64, n_gpu_layers=1, device="cuda", cache_type_k="q8_0", cache_type_v="q8_0")
    auto = LLM(path, n_ctx=64, n_gpu_layers="auto", device="cuda", cache_type_k="q8_0", cache_type_v="q8_0")
    assert auto.n_gpu_layers == 0
