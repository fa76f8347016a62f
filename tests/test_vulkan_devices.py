"""Vulkan device enumeration: the listing, `localllm info --devices`, and a machine without a
Vulkan loader (simulated with LOCALLLM_VULKAN_LOADER pointing at a missing library)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from localllm import _core
from vulkan_support import vulkan_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "localllm_cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=ROOT, timeout=120)


def test_devices_are_described():
    vulkan_device()   # skips (or fails under LOCALLLM_REQUIRE_VULKAN=1) without a device
    devices = _core.vulkan_devices()
    assert [d["index"] for d in devices] == list(range(len(devices)))
    for d in devices:
        assert d["type"] in ("discrete", "integrated", "virtual", "cpu", "other")
        assert d["name"] and d["api_version"].count(".") == 2
        assert 0 < d["free_bytes"] <= d["total_bytes"]
        assert d["subgroup_size"] >= 1
        assert set(d["features"]) >= {"shaderFloat16", "shaderInt8", "storageBuffer8BitAccess",
                                      "storageBuffer16BitAccess", "VK_KHR_shader_integer_dot_product",
                                      "VK_KHR_cooperative_matrix"}
    # One device at most is the default, and never a CPU implementation unless allowed.
    defaults = [d for d in devices if d["default"]]
    assert len(defaults) <= 1
    if os.environ.get("LOCALLLM_VULKAN_ALLOW_CPU", "") in ("", "0"):
        assert all(d["type"] != "cpu" for d in defaults)


def test_lavapipe_is_a_cpu_device_and_not_the_default_unless_allowed():
    vulkan_device()
    lavapipe = [d for d in _core.vulkan_devices() if "llvmpipe" in d["name"]]
    if not lavapipe:
        pytest.skip("no lavapipe on this machine")
    assert lavapipe[0]["type"] == "cpu"
    probe = ("from localllm import _core; "
             "print(sum(d['default'] for d in _core.vulkan_devices() if d['type'] == 'cpu'))")
    for allow, expected in (("0", "0"), ("1", "1")):
        env = {**os.environ, "LOCALLLM_VULKAN_ALLOW_CPU": allow, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        # With other (GPU) devices present, a CPU one is never the default either way.
        gpus = [d for d in _core.vulkan_devices() if d["type"] != "cpu" and d["usable"]]
        assert out.stdout.strip() == ("0" if gpus else expected)


def test_info_devices_lists_cpu_and_vulkan():
    proc = run_cli("info", "--devices", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows[0]["device"] == "cpu" and rows[0]["total_bytes"] > 0
    assert [r["device"] for r in rows[1:]] == [f"vulkan:{d['index']}" for d in _core.vulkan_devices()]
    text = run_cli("info", "--devices")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[1].startswith("cpu")


def test_without_a_loader_nothing_is_listed_and_the_cpu_still_works():
    env = {"LOCALLLM_VULKAN_LOADER": "/nonexistent/libvulkan.so.1"}
    probe = ("import numpy as np; from localllm import _core, _harness; "
             "assert _core.vulkan_devices() == []; print(_core.vulkan_unavailable_reason()); "
             "x = np.ones(64, np.float32); print(float(_harness.rms_norm(x, x, 1e-6)[0]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    reason, value = out.stdout.strip().splitlines()[-2:]
    if _core.vulkan_compiled:
        assert "nonexistent" in reason
    assert float(value) == pytest.approx(1.0, rel=1e-5)
    proc = run_cli("info", "--devices", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()[1:]] == ["cpu"]
    if _core.vulkan_compiled:   # running an op says why instead of crashing
        fail = ("from localllm import _harness; import numpy as np\n"
                "try:\n    _harness.vulkan_scale(np.ones(4, np.float32), 2.0)\n"
                "except RuntimeError as e:\n    print('error:', e)\n")
        out = subprocess.run([sys.executable, "-c", fail], capture_output=True, text=True,
                             env={**os.environ, **env}, timeout=60)
        assert out.returncode == 0 and "error: Vulkan unavailable" in out.stdout, out.stdout + out.stderr


def test_core_does_not_link_the_vulkan_loader():
    if sys.platform != "linux":
        pytest.skip("ldd check is Linux-only")
    out = subprocess.run(["ldd", _core.__file__], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("ldd unavailable")
    assert "libvulkan" not in out.stdout


def test_cli_device_numbers():
    """`--device vulkan:N` takes device N of `info --devices`; a malformed one is a usage error."""
    from conftest import model_file
    number = _core.resolve_device("Vulkan")[1]
    if number < 0:
        pytest.skip("no Vulkan device")
    path = str(model_file("smollm2-135m-q4_1"))
    proc = run_cli("info", path, "--plan", "-ngl", "all", "--device", f"vulkan:{number}")
    assert proc.returncode == 0 and "Vulkan" in proc.stdout, proc.stdout + proc.stderr
    bad = run_cli("run", "-m", path, "-p", "Hi", "--device", "vulkan:one")
    assert bad.returncode == 2 and "device must be one of" in bad.stderr and "Traceback" not in bad.stderr
