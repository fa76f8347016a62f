"""The auto-fit planner (`-ngl N|all|auto`) against simulated free GPU memory, on the real
footprint of the real models, and the plan's CPU side against what loading allocates."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import MODEL_KEYS, REPO, model_file
from localllm import LLM, _core
from localllm.plan import (DEFAULT_GPU_MARGIN, MIN_AUTO_CTX, kv_blocks_for, parse_n_gpu_layers,
                           plan_layers)

BS, BATCH = 16, 512
MIB = 1 << 20


@pytest.fixture(scope="module")
def fp() -> _core.Footprint:
    return _core.Footprint(str(model_file("smollm2-135m-q4_1")))


def gpu_total(fp, layers: int, n_ctx: int, kv_blocks: int | None = None) -> int:
    """What the GPU side needs for `layers` layers at this context, straight from the footprint."""
    blocks = kv_blocks if kv_blocks is not None else kv_blocks_for(n_ctx, BS)
    d = fp.bytes(layers, blocks, BS, BATCH)["CUDA"]
    return d["weights"] + d["kv"] + d["scratch"]


def plan(fp, ngl, gpu_free, n_ctx=4096, ctx_set=False, kv_blocks=None, margin=DEFAULT_GPU_MARGIN):
    return plan_layers(fp.bytes, fp.n_layer, ngl, n_ctx=n_ctx, kv_block_size=BS, n_batch=BATCH,
                       kv_blocks=kv_blocks, ctx_set=ctx_set, gpu_free=gpu_free, gpu_margin=margin)


def test_footprint_layers_add_up(fp):
    """Each layer moved to the GPU moves its bytes: weights and KV grow by one layer's worth."""
    one = fp.bytes(1, 257, BS, BATCH)["CUDA"]
    two = fp.bytes(2, 257, BS, BATCH)["CUDA"]
    assert two["kv"] == 2 * one["kv"] > 0
    assert two["weights"] > one["weights"] > 0
    assert two["scratch"] == one["scratch"]
    cpu0 = fp.bytes(0, 257, BS, BATCH)
    assert set(cpu0) == {"CPU"} and cpu0["CPU"]["kv"] == fp.n_layer * one["kv"]


def test_auto_without_gpu_plans_the_cpu_only(fp):
    p = plan(fp, "auto", None)
    assert p.n_gpu_layers == 0 and p.n_ctx == 4096 and set(p.devices) == {"CPU"} and p.fits


def test_auto_puts_every_layer_when_they_fit(fp):
    need = gpu_total(fp, fp.n_layer, 4096)
    p = plan(fp, "auto", need + DEFAULT_GPU_MARGIN)              # exactly enough
    assert (p.n_gpu_layers, p.n_ctx, p.kv_blocks) == (fp.n_layer, 4096, kv_blocks_for(4096, BS))
    assert p.devices["CUDA"].total == need and p.fits


def test_margin_is_kept_free(fp):
    need = gpu_total(fp, fp.n_layer, 4096)
    p = plan(fp, "auto", need + 256 * MIB - 1, ctx_set=True, margin=256 * MIB)
    assert p.n_gpu_layers == fp.n_layer - 1
    assert p.devices["CUDA"].total <= need - 1 and p.gpu_budget == need - 1


def test_auto_shrinks_the_default_context_before_moving_layers(fp):
    need_2048 = gpu_total(fp, fp.n_layer, 2048)
    p = plan(fp, "auto", need_2048 + DEFAULT_GPU_MARGIN)
    assert (p.n_gpu_layers, p.n_ctx, p.kv_blocks) == (fp.n_layer, 2048, kv_blocks_for(2048, BS))
    assert any("shrunk from 4096 to 2048" in n for n in p.notes)


def test_auto_never_shrinks_a_context_the_user_set(fp):
    need_2048 = gpu_total(fp, fp.n_layer, 2048)
    p = plan(fp, "auto", need_2048 + DEFAULT_GPU_MARGIN, ctx_set=True)
    assert p.n_ctx == 4096 and p.n_gpu_layers < fp.n_layer and p.fits


def test_auto_never_shrinks_a_pool_the_user_set(fp):
    need_small = gpu_total(fp, fp.n_layer, MIN_AUTO_CTX)
    p = plan(fp, "auto", need_small + DEFAULT_GPU_MARGIN, kv_blocks=257)
    assert p.kv_blocks == 257 and p.n_gpu_layers < fp.n_layer and p.fits


def test_auto_picks_the_most_layers_that_fit(fp):
    """Between the need of k and k+1 layers (at the smallest context auto tries): k layers."""
    k = fp.n_layer // 2
    free = gpu_total(fp, k + 1, MIN_AUTO_CTX) - 1 + DEFAULT_GPU_MARGIN
    p = plan(fp, "auto", free)
    assert p.n_gpu_layers == k and p.fits
    assert p.devices["CUDA"].total <= free - DEFAULT_GPU_MARGIN
    # the largest context that fits k layers, halving from 4096
    fitting = [c for c in (4096, 2048, 1024) if gpu_total(fp, k, c) <= free - DEFAULT_GPU_MARGIN]
    assert p.n_ctx == fitting[0]


def test_auto_with_too_little_memory_plans_zero_layers(fp):
    p = plan(fp, "auto", DEFAULT_GPU_MARGIN + MIB)
    assert p.n_gpu_layers == 0 and set(p.devices) == {"CPU"} and p.fits


def test_explicit_count_and_all(fp):
    big = 1 << 40
    assert plan(fp, 5, big).n_gpu_layers == 5
    assert plan(fp, "all", big).n_gpu_layers == fp.n_layer
    assert plan(fp, 10 * fp.n_layer, big).n_gpu_layers == fp.n_layer     # llama.cpp's -ngl 999
    assert plan(fp, 0, big).devices.keys() == {"CPU"}


def test_explicit_count_that_does_not_fit_says_what(fp):
    p = plan(fp, "all", DEFAULT_GPU_MARGIN + MIB, ctx_set=True)
    assert not p.fits and p.n_gpu_layers == fp.n_layer
    assert "does not fit: the GPU needs" in p.notes[-1] and "weights" in p.notes[-1]


def test_explicit_count_shrinks_only_the_default_context(fp):
    need_1024 = gpu_total(fp, fp.n_layer, 1024)
    p = plan(fp, "all", need_1024 + DEFAULT_GPU_MARGIN)
    assert p.fits and p.n_ctx == 1024


@pytest.mark.parametrize("bad", [-1, "-2", "some", 1.5, True, "1e3"])
def test_bad_n_gpu_layers_is_refused(bad):
    with pytest.raises(ValueError, match="n_gpu_layers must be"):
        parse_n_gpu_layers(bad)


def test_n_gpu_layers_forms():
    assert parse_n_gpu_layers(None) == "auto"
    assert parse_n_gpu_layers(" ALL ") == "all"
    assert parse_n_gpu_layers("12") == 12


@pytest.mark.parametrize("key", MODEL_KEYS)
@pytest.mark.parametrize("numerics", ["fast", "llama.cpp"])
def test_plan_cpu_side_equals_what_loading_allocates(key, numerics):
    path = str(model_file(key))
    fp = _core.Footprint(path, numerics)
    p = plan_layers(fp.bytes, fp.n_layer, 0, n_ctx=1024, kv_block_size=BS, n_batch=256,
                    ctx_set=True, gpu_free=None)
    m = _core.Model(path, 1, p.kv_blocks, BS, numerics)
    m.reserve(256)
    cpu = p.devices["CPU"]
    assert m.allocated == {"CPU": {"weights": cpu.weights, "kv": cpu.kv, "scratch": cpu.scratch}}
    assert m.kv_bytes == cpu.kv
    # a forward of the planned batch allocates nothing more
    n = 256
    m.forward(np.arange(n, dtype=np.int32) % 100, np.arange(n, dtype=np.int32), np.zeros(n, np.int32),
              np.arange(1, 1 + n // BS, dtype=np.int32)[None, :], np.array([n - 1], np.int32))
    assert m.allocated["CPU"]["scratch"] == cpu.scratch
    if numerics == "fast" and _core.best_isa() in (1, 2):
        assert cpu.weights > 0      # the repacked arena and the vector copies (AVX2 / AVX-512 panels)
    else:
        assert cpu.weights == 0     # nothing repacked: the kernels read the mapped GGUF bytes
    assert m.layer_devices == ["CPU"] * fp.n_layer and m.output_device == "CPU"


def test_llm_loads_what_it_planned():
    llm = LLM(str(model_file("smollm2-135m-q4_1")), n_ctx=512, n_batch=128, n_gpu_layers="auto")
    fp = _core.Footprint(str(llm.model_path))
    want = fp.bytes(0, kv_blocks_for(512, BS), BS, 128)
    assert llm._model.allocated == want and llm.n_gpu_layers == 0


@pytest.mark.skipif(_core.backend_compiled("CUDA"), reason="checks the build without a CUDA backend")
def test_gpu_layers_without_a_cuda_backend_are_a_clear_error():
    path = str(model_file("smollm2-135m-q4_1"))
    for ngl in (1, "all"):
        with pytest.raises(ValueError, match="no CUDA backend.*n_gpu_layers=0"):
            LLM(path, n_gpu_layers=ngl)
    with pytest.raises(ValueError, match="no CUDA backend"):
        _core.Model(path, 1, 8, 16, "fast", 2)
    with pytest.raises(ValueError, match=r"n_gpu_layers = 31 is out of range \[0, 30\]"):
        _core.Model(path, 1, 8, 16, "fast", 31)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localllm_cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_info_plan_prints_every_device(fp):
    path = str(model_file("smollm2-135m-q4_1"))
    need = gpu_total(fp, 10, 4096)
    r = cli("info", path, "--plan", "-ngl", "10", "--gpu-free", str(need + DEFAULT_GPU_MARGIN), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_gpu_layers"] == 10 and out["fits"] and out["n_ctx"] == 4096
    assert out["devices"]["CUDA"]["total"] == need
    cpu = fp.bytes(10, kv_blocks_for(4096, BS), BS, BATCH)["CPU"]
    assert out["devices"]["CPU"]["weights"] == cpu["weights"]
    r = cli("info", path, "--plan", "-ngl", "all", "--gpu-free", "1100M", "-c", "4096")
    assert r.returncode == 1 and "does not fit" in r.stdout and "CUDA" in r.stdout


@pytest.mark.skipif(_core.backend_compiled("CUDA"), reason="checks the build without a CUDA backend")
def test_cli_ngl_without_cuda_and_device_cpu():
    path = str(model_file("smollm2-135m-q4_1"))
    r = cli("run", "-m", path, "-p", "Hi", "-n", "1", "-ngl", "2")
    assert r.returncode != 0 and "no CUDA backend" in r.stderr and "Traceback" not in r.stderr
    r = cli("run", "-m", path, "-p", "The capital of France is", "-n", "2", "--temp", "0", "--device", "cpu")
    assert r.returncode == 0 and "Paris" in r.stdout
    r = cli("run", "-m", path, "-p", "Hi", "-n", "1", "--device", "cpu", "-ngl", "3")
    assert r.returncode != 0 and "contradicts" in r.stderr
