"""Shared by the Vulkan tests: the device they run on, or a skip (a failure when
LOCALLLM_REQUIRE_VULKAN=1, as CI sets it, so a CI machine that lost its driver cannot pass)."""
from __future__ import annotations

import contextlib
import os

import pytest

from localllm import _core, _harness


def vulkan_device() -> int:
    """Index of the device the op tests use: the first usable one, CPU implementations (lavapipe)
    included when LOCALLLM_VULKAN_ALLOW_CPU=1."""
    why = None
    if not getattr(_core, "vulkan_compiled", False):
        why = "no Vulkan device: this build has no Vulkan backend"
    else:
        allow_cpu = os.environ.get("LOCALLLM_VULKAN_ALLOW_CPU", "") not in ("", "0")
        for d in _core.vulkan_devices():
            if d["usable"] and (d["type"] != "cpu" or allow_cpu):
                return d["index"]
        why = f"no Vulkan device ({_core.vulkan_unavailable_reason() or 'none usable'})"
    if os.environ.get("LOCALLLM_REQUIRE_VULKAN", "") not in ("", "0"):
        pytest.fail(f"LOCALLLM_REQUIRE_VULKAN=1 but {why}")
    pytest.skip(why)


def validation_count() -> int:
    return _harness.vulkan_validation_messages()[0] if getattr(_core, "vulkan_compiled", False) else 0


def assert_no_new_validation_messages(before: int) -> None:
    count, first = _harness.vulkan_validation_messages()
    assert count == before, f"{count - before} Vulkan validation messages, the first: {first}"


@contextlib.contextmanager
def no_validation_messages_in_either_instance():
    """Fails the test inside if _harness's Vulkan instance (the op tests) or _core's (the models)
    logged a validation message."""
    before = (validation_count(), _core.vulkan_validation_messages()[0])
    yield
    assert_no_new_validation_messages(before[0])
    count, first = _core.vulkan_validation_messages()
    assert count == before[1], f"{count - before[1]} Vulkan validation messages in _core, the first: {first}"
