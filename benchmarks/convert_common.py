"""Shared by the converter benchmarks: the test checkpoints, and llama.cpp's quantizer run in a
fresh process of the llama-cpp-python cache venv (built by benchmarks/compare_llamacpp.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for sub in ("python", "cli", "convert", "tests"):
    if str(REPO / sub) not in sys.path:
        sys.path.insert(0, str(REPO / sub))

from llamacpp_venv import VENV  # noqa: E402

from localllm_convert.filetypes import PRESETS  # noqa: E402

# LLAMA_FTYPE ids of the quantized presets (what llama_model_quantize is asked for)
FTYPES = {name: p.ftype for name, p in PRESETS.items() if p.quantized}

_LLAMACPP_QUANTIZE = r"""
import ctypes, json, sys, time, llama_cpp
src, dst, ftype, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = ftype
params.nthread = threads
t0 = time.perf_counter()
rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t0, "max_rss_mb": int(hwm) / 1024}))
"""
# (peak RSS from VmHWM: ru_maxrss survives fork+exec, so a child would report its parent's)


def llamacpp_python() -> Path:
    py = VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([str(py), "-c", "import llama_cpp"],
                                        capture_output=True).returncode == 0
    if not ok:
        sys.exit(f"llama-cpp-python is not installed in {VENV}: run benchmarks/compare_llamacpp.py "
                 "once (it builds it), or set LOCALLLM_BENCH_VENV")
    return py


def llamacpp_quantize(src: Path, dst: Path, preset: str, threads: int) -> dict:
    """llama.cpp's llama_model_quantize in a fresh process: {seconds, max_rss_mb}."""
    proc = subprocess.run([str(llamacpp_python()), "-c", _LLAMACPP_QUANTIZE, str(src), str(dst),
                           str(FTYPES[preset]), str(threads)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp quantize failed: {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"llama_model_quantize returned {result['rc']}: {proc.stderr[-2000:]}")
    return result


def checkpoint(name: str) -> Path:
    """The test suite's checkpoint (built and cached on first use)."""
    import test_convert
    return test_convert.checkpoint(name)
