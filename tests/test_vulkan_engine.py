"""The engine and the server with layers on Vulkan (lavapipe in CI): continuous batching
with prefix caching and preemption frees every block and gives each sequence the greedy tokens it
gets alone; `localllm serve --device vulkan -ngl all` answers chat as LLM.chat on the same device,
streams, and aborts a request whose client left. Lavapipe is a CPU: few tokens, short prompts."""
from __future__ import annotations

import random

import httpx
import openai
import pytest

from conftest import model_file
from localllm import LLM, _core
from localllm.engine import Engine
from localllm.gguf import GGUFFile
from localllm.sampling import SamplingParams
from localllm.text.tokenizer import Tokenizer
from serving import LiveServer
from vulkan_support import assert_no_new_validation_messages, validation_count, vulkan_device

KEY = "smollm2-135m-q4_1"
GPU_LAYERS = 3   # lavapipe is a CPU: the engine test keeps the work small


@pytest.fixture(scope="module")
def device_spec() -> str:
    vulkan_device()   # skips (or fails under LOCALLLM_REQUIRE_VULKAN=1) without a device
    name, number = _core.resolve_device("Vulkan")
    return f"{name}:{number}"


@pytest.fixture(autouse=True)
def no_validation_messages(device_spec):
    before = validation_count()
    yield
    assert_no_new_validation_messages(before)


def vulkan_engine(device_spec: str, kv_blocks: int, cache_types: tuple[str, str], **kw) -> Engine:
    """SmolLM2 with its last GPU_LAYERS layers and the output head on Vulkan (a hybrid split:
    the residual stream crosses devices every step); the rest on the CPU."""
    path = str(model_file(KEY))
    model = _core.Model(path, 2, kv_blocks, 16, n_gpu_layers=GPU_LAYERS, device=device_spec,
                        cache_type_k=cache_types[0], cache_type_v=cache_types[1])
    assert model.layer_devices.count("Vulkan") == GPU_LAYERS and model.output_device == "Vulkan"
    tokenizer = Tokenizer.from_gguf_metadata(GGUFFile(path).metadata)
    return Engine(model, tokenizer, n_ctx=256, **kw)


# The default cache, and a quantized one (shared and copied blocks of q8_0 keys, q4_0 values).
@pytest.mark.parametrize("cache_types", [("f16", "f16"), ("q8_0", "q4_0")])
def test_16_sequences_with_prefix_caching_and_preemption(device_spec, cache_types):
    rng = random.Random(0)
    # 9 usable blocks of 16 slots for 16 prompts of 32 tokens (2 blocks; half share the first):
    # the prompts admitted at once fill the pool, and their decode steps, each needing a new
    # block (prompts end on block boundaries), make the engine preempt.
    eng = vulkan_engine(device_spec, 10, cache_types, max_batch_tokens=256, max_running=16)
    shared = [rng.randrange(1, 40000) for _ in range(16)]
    prompts = [(shared if i % 2 == 0 else [rng.randrange(1, 40000) for _ in range(16)]) +
               [rng.randrange(1, 40000) for _ in range(16)] for i in range(16)]
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    ids = [eng.submit(p, params) for p in prompts]
    got = {rid: [t for o in eng.outputs(rid) for t in o.token_ids] for rid in ids}
    assert all(len(t) == 3 for t in got.values())
    assert eng.stats.preemptions > 0 and eng.pool.stats.hit_blocks > 0, (eng.stats, eng.pool.stats)
    assert eng.pool.num_used == 0 and eng.pool.num_free == eng.pool.capacity
    assert all(eng.pool.ref_counts[b] == 0 for b in range(1, eng.pool.n_blocks))
    # Preempted, batched, cached or not: each sequence's tokens are the ones it gets alone.
    alone = vulkan_engine(device_spec, 8, cache_types, max_batch_tokens=64, max_running=1)
    for i in rng.sample(range(16), 2):
        solo = alone.submit(prompts[i], params)
        assert [t for o in alone.outputs(solo) for t in o.token_ids] == got[ids[i]], i


@pytest.fixture(scope="module")
def server(device_spec):
    number = device_spec.split(":")[1]
    with LiveServer(model_file(KEY), "-c", "256", "--parallel", "2", "-ngl", "all", "--device",
                    f"vulkan:{number}", timeout=300) as srv:
        yield srv


def test_server_chat_stream_and_abort_on_vulkan(server, device_spec):
    number = device_spec.split(":")[1]
    llm = LLM(str(model_file(KEY)), n_threads=2, n_ctx=256, n_gpu_layers="all", device=f"vulkan:{number}")
    messages = [{"role": "user", "content": "Name a color."}]
    want = llm.chat(messages, max_tokens=4, temperature=0.9, top_p=0.9, seed=7)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    r = client.chat.completions.create(model=model_file(KEY).stem, messages=messages, max_tokens=4, temperature=0.9, top_p=0.9,
                                       seed=7)
    assert r.choices[0].message.content == want.text and r.choices[0].finish_reason == want.finish_reason
    stream = client.chat.completions.create(model=model_file(KEY).stem, messages=messages, max_tokens=4, temperature=0.9,
                                            top_p=0.9, seed=7, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want.text
    # A client that leaves mid-stream: the request ends aborted and its blocks are free.
    body = {"prompt": "Tell me a very long story.", "max_tokens": 200, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with httpx.Client(timeout=300) as http:
        with http.stream("POST", f"{server.url}/v1/completions", json=body) as resp:
            lines = resp.iter_lines()
            got = [next(lines) for _ in range(2)]
            assert all(not g or g.startswith("data: ") for g in got)
    m = server.wait_idle(timeout=120)
    assert m["localllm_kv_blocks_used"] == 0 and m["localllm_requests_running"] == 0
    assert 'localllm_requests_finished_total{finish_reason="abort"} 1.0' in httpx.get(f"{server.url}/metrics").text
