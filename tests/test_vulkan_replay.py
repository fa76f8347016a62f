"""Decode steps recorded once and resubmitted on Vulkan (csrc/backends/vulkan/vk_recording.h),
and submissions bounded by LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT and by estimated work
(LOCALLLM_VULKAN_MAX_SUBMIT_MS), their parts queued back to back: greedy tokens with replay on
equal the tokens with every submission recorded afresh (LOCALLLM_VULKAN_REPLAY=0), with every
SmolLM2 layer on the device, with a CPU/Vulkan split, and with two sequences decoding together
through the engine; the command counters show the steps were replayed, and the submissions
bounded and queued. Runs on lavapipe (LOCALLLM_VULKAN_ALLOW_CPU=1), where each token takes about
a second."""
from __future__ import annotations

import os

import pytest

from conftest import model_file
from localllm import LLM, _core
from vulkan_support import vulkan_device

N_TOKENS = 16
PROMPT = "The capital of France is"
# A prompt of another length, so the two sequences sit at other positions in their blocks.
OTHER = "def fibonacci(n):\n    "


@pytest.fixture(scope="module")
def smollm2() -> str:
    vulkan_device()   # skips (or fails under LOCALLLM_REQUIRE_VULKAN=1) without a device
    return str(model_file("smollm2-135m-q4_1"))


@pytest.fixture(autouse=True)
def no_validation_messages(smollm2):
    before = _core.vulkan_validation_messages()[0]
    yield
    count, first = _core.vulkan_validation_messages()
    assert count == before, f"{count - before} Vulkan validation messages, the first: {first}"


def greedy(path: str, prompts: list[str], ngl, monkeypatch, **env: str) -> tuple[list[list[int]], dict]:
    """Each prompt's N_TOKENS greedy tokens (the prompts decoded together) on a model loaded under
    `env`, and the command counters of its generation (model loading excluded)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    llm = LLM(path, n_ctx=128, n_gpu_layers=ngl, device="vulkan")
    _core.vulkan_command_stats(reset=True)
    out = llm.generate(prompts, max_tokens=N_TOKENS, temperature=0.0, ignore_eos=True)
    stats = _core.vulkan_command_stats(reset=True)
    for k in env:
        monkeypatch.delenv(k)
    return [r.token_ids for r in out], stats


def assert_replayed(stats: dict, steps: int) -> None:
    """Every decode step after the first of its shape resubmitted a kept command buffer."""
    assert stats["replays"] >= steps - 2, stats
    assert stats["recordings"] <= 4, stats


@pytest.mark.parametrize("ngl", ["all", 15])
def test_replay_gives_the_tokens_of_steps_recorded_afresh(smollm2, ngl, monkeypatch):
    fresh, fresh_stats = greedy(smollm2, [PROMPT], ngl, monkeypatch, LOCALLLM_VULKAN_REPLAY="0")
    replayed, stats = greedy(smollm2, [PROMPT], ngl, monkeypatch)
    assert len(replayed[0]) == N_TOKENS
    assert replayed == fresh
    assert fresh_stats["replays"] == 0 and fresh_stats["recordings"] == fresh_stats["submits"]
    assert_replayed(stats, N_TOKENS - 1)
    # A prompt and N_TOKENS - 1 decode steps: one submission each (uploads, layers, logits).
    assert stats["submits"] == N_TOKENS, stats


def test_two_sequences_through_the_engine(smollm2, monkeypatch):
    """Two sequences decode in one batch (the engine's continuous batching): a step shape of its
    own, replayed like a single sequence's, with the same tokens as recorded afresh."""
    fresh, _ = greedy(smollm2, [PROMPT, OTHER], "all", monkeypatch, LOCALLLM_VULKAN_REPLAY="0")
    replayed, stats = greedy(smollm2, [PROMPT, OTHER], "all", monkeypatch)
    assert [len(t) for t in replayed] == [N_TOKENS, N_TOKENS]
    assert replayed == fresh
    assert_replayed(stats, N_TOKENS - 1)


def test_bounded_submissions_give_the_same_tokens(smollm2, monkeypatch):
    """At most 40 dispatches per submission: a step becomes a dozen submissions, each replayed."""
    fresh, fresh_stats = greedy(smollm2, [PROMPT], "all", monkeypatch, LOCALLLM_VULKAN_REPLAY="0")
    bounded, stats = greedy(smollm2, [PROMPT], "all", monkeypatch, LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT="40")
    assert bounded == fresh
    assert fresh_stats["largest_submit"] > 400, fresh_stats   # a whole step in one submission by default
    assert stats["largest_submit"] <= 40, stats
    per_step = fresh_stats["dispatches"] / N_TOKENS
    assert stats["submits"] >= N_TOKENS * per_step / 40, stats
    assert stats["replays"] >= (N_TOKENS - 2) * per_step / 40, stats
    assert_queued_back_to_back(stats, fresh_stats)


def assert_queued_back_to_back(stats: dict, whole_steps: dict) -> None:
    """A step's parts were queued behind each other and waited for together: the host waited as
    often as with each step in one submission (where a result comes back), not once per part."""
    assert stats["waits"] == whole_steps["waits"] <= 2 * N_TOKENS, (stats, whole_steps)
    assert stats["queued_behind"] >= stats["submits"] - stats["waits"], stats


def test_submissions_bounded_by_estimated_work(smollm2, monkeypatch):
    """At most 1 ms of a slow integrated GPU's work per submission (a decode step of SmolLM2 is
    about 10): a step becomes a dozen submissions, each holding more than one op only where they
    fit; the same tokens. By default a decode step is one submission (the first test)."""
    fresh, fresh_stats = greedy(smollm2, [PROMPT], "all", monkeypatch, LOCALLLM_VULKAN_REPLAY="0")
    bounded, stats = greedy(smollm2, [PROMPT], "all", monkeypatch, LOCALLLM_VULKAN_MAX_SUBMIT_MS="1")
    assert bounded == fresh
    assert stats["work_s"] == pytest.approx(fresh_stats["work_s"])
    # The estimate counts every weight a step reads: at least the file's bytes at 20 GB/s.
    assert stats["work_s"] / N_TOKENS >= 0.9 * os.path.getsize(smollm2) / 20e9, stats
    assert stats["largest_submit_s"] <= max(1e-3, stats["largest_op_s"]) * (1 + 1e-9), stats
    assert stats["submits"] >= stats["work_s"] / max(1e-3, stats["largest_op_s"]), stats
    assert stats["submits"] >= 5 * N_TOKENS, stats
    assert_queued_back_to_back(stats, fresh_stats)


@pytest.mark.parametrize("name, value", [("LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT", v) for v in ["0", "many", "-3", "2.5"]] +
                         [("LOCALLLM_VULKAN_MAX_SUBMIT_MS", v) for v in ["0", "soon", "-1", "nan"]] +
                         [("LOCALLLM_VULKAN_TIMEOUT_S", v) for v in ["0", "later", "-5", "inf"]] +
                         [("LOCALLLM_VULKAN_BUDGET", v) for v in ["lots", "-1", "1.5"]])
def test_a_bad_knob_is_named_when_the_model_loads(smollm2, name, value, monkeypatch):
    """Every Vulkan knob is checked when a device context is made, and a bad value is an error
    naming the variable, never a silent default."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        LLM(smollm2, n_ctx=64, n_gpu_layers=1, device="vulkan")


def test_a_submission_past_its_timeout_is_an_error_not_a_hang(smollm2, monkeypatch):
    """A wait that times out (LOCALLLM_VULKAN_TIMEOUT_S, here a microsecond: lavapipe cannot run
    a prompt in it, as a hung GPU would not) raises and names the knob; the device then refuses
    work at once, and the model still unloads."""
    monkeypatch.setenv("LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT", "40")   # several parts queued
    llm = LLM(smollm2, n_ctx=64, n_gpu_layers="all", device="vulkan")
    monkeypatch.setenv("LOCALLLM_VULKAN_TIMEOUT_S", "0.000001")
    with pytest.raises(RuntimeError, match="did not finish within .*LOCALLLM_VULKAN_TIMEOUT_S"):
        llm.generate([PROMPT], max_tokens=2, temperature=0.0)
    monkeypatch.delenv("LOCALLLM_VULKAN_TIMEOUT_S")
    with pytest.raises(RuntimeError, match="unusable: a submission did not finish"):
        llm.generate([PROMPT], max_tokens=2, temperature=0.0)
    del llm
