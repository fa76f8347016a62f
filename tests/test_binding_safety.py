"""Binding safety: every `_core` and `_harness` function given hostile arguments — wrong dtypes, shapes and
ranks, strides (non-contiguous views), read-only arrays, huge or negative sizes, NaN, None,
strings — raises TypeError or ValueError, never crashes or hangs.

Hypothesis draws the arguments; each function's examples run in a subprocess (a crash there
fails this test with the call that caused it instead of killing pytest)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import localllm

# Module functions and the methods of objects a caller can build, with their arity. Benchmarks'
# own loops (read_bandwidth, threadpool_dispatch_ns) take sizes too: they are held to the same rule.
FUNCTIONS = {
    "attention_exp": 1, "attention_test": 14, "can_quantize": 1, "dequantize": 3, "geglu": 3, "gelu_erf": 2,
    "isa_available": 1, "isa_name": 1, "matmul": 7, "matmul_llamacpp": 7, "matmul_repacked": 8,
    "quantize": 2, "quantize_act": 3, "read_bandwidth": 3, "repack_weight": 5, "rms_norm": 4,
    "swiglu": 3, "threadpool_dispatch_ns": 3, "type_info": 1, "vec_dot": 5, "vec_dot_isa": 2,
    "Model.forward": 6, "Model.copy_block": 2, "Sampler": 2, "GGUFFile.tensor_data": 1, "GGUFFile.get": 2,
}
# The Vulkan op harness, where it has a device to run on (the one tests/vulkan_support.py picks).
_ALLOW_CPU = os.environ.get("LOCALLLM_VULKAN_ALLOW_CPU", "") not in ("", "0")
if any(d["usable"] and (d["type"] != "cpu" or _ALLOW_CPU) for d in localllm._core.vulkan_devices()):
    FUNCTIONS.update({"vulkan_add": 3, "vulkan_scale": 3, "vulkan_glu": 4, "vulkan_dequantize": 5,
                      "vulkan_embed": 6, "vulkan_linear": 7, "vulkan_rms_norm": 4, "vulkan_rope": 6})
# Lookups by name keep Python's mapping convention: an absent name is a KeyError.
LOOKUP_ERRORS = {"GGUFFile.tensor_data": "KeyError"}
EXAMPLES = int(os.environ.get("LOCALLLM_BINDING_EXAMPLES", "150"))

PROBE = r'''
import json, sys
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from localllm import _core, _harness, hub
from localllm.gguf import GGUFFile

name, arity, examples, model_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
expected = (TypeError, ValueError) + ((KeyError,) if sys.argv[5] == "KeyError" else ())
if name.startswith("Model."):
    target = getattr(_core.Model(model_path, 1, 4), name.split(".")[1])
elif name.startswith("GGUFFile."):
    target = getattr(GGUFFile(model_path), name.split(".")[1])
elif name == "Sampler":
    target = _core.Sampler
else:
    target = getattr(_core, name) if hasattr(_core, name) else getattr(_harness, name)

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_]
SIZES = st.sampled_from([0, 1, 2, 3, 16, 31, 32, 256, -1, -2**31, 2**31 - 1, 2**31, 2**62, 2**63 - 1])

@st.composite
def arrays(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 16, 32, 34, 64]), min_size=0, max_size=3)))
    a = np.asarray(draw(st.sampled_from([0, 1, -1, 1e30, float("nan"), 7])), dtype=np.float64)
    a = np.full(shape, a).astype(dtype, casting="unsafe")
    if draw(st.booleans()) and a.ndim >= 1 and a.shape[-1] > 1:
        a = a[..., ::2]                       # non-contiguous
    if draw(st.booleans()) and a.ndim >= 2:
        a = a.T                               # Fortran order
    if draw(st.booleans()):
        a.setflags(write=False)               # read-only
    return a

VALUES = st.one_of(arrays(), SIZES, st.floats(allow_nan=True), st.none(), st.text(max_size=8),
                   st.booleans(), st.lists(st.integers(-5, 5), max_size=4), st.binary(max_size=8))

@settings(max_examples=examples, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(VALUES, min_size=max(0, arity - 1), max_size=arity))
def probe(args):
    shown = ", ".join(f"array({a.dtype}, {a.shape}, C={a.flags.c_contiguous}, W={a.flags.writeable})"
                      if isinstance(a, np.ndarray) else repr(a)[:40] for a in args)
    print(f"CALL {name}({shown})", flush=True)
    try:
        target(*args)
    except expected:
        pass

probe()
print("DONE", flush=True)
'''


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_hostile_arguments_raise_type_or_value_error(name):
    from conftest import model_file
    python_dir = Path(localllm.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(python_dir), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", PROBE, name, str(FUNCTIONS[name]), str(EXAMPLES),
                           str(model_file("smollm2-135m-q4_1")), LOOKUP_ERRORS.get(name, "-")], capture_output=True, text=True, env=env,
                          timeout=900)
    calls = [line for line in proc.stdout.splitlines() if line.startswith("CALL")]
    last = calls[-1] if calls else "(no call)"
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("DONE"), \
        f"{last}\nrc={proc.returncode}\n{proc.stderr[-3000:]}"
