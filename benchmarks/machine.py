"""The machine a benchmark ran on, printed beside its figures: CPU model, the kernel level localllm
used (AVX2 / AVX-512 VNNI / AMX), what llama.cpp was built with and uses, threads, and the read
bandwidth measured in the same run. Machines differ from session to session (some grant AMX, some
are AMD Zen 4 without it): a ratio means little without this line."""
from __future__ import annotations

import json
import platform
import subprocess


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:   # aarch64's /proc/cpuinfo has part numbers only; lscpu names them (e.g. Neoverse-N1)
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def localllm_isa() -> str:
    from localllm import _core
    names = {0: "scalar", 1: "AVX2", 2: "AVX-512 VNNI", 3: "Neon", 4: "Neon dotprod"}
    isa = names[_core.best_isa()]
    if _core.amx_available():
        isa += " + AMX"
    if _core.best_isa() == 1 and _core.build_target() == "avx512":
        # Capped by LOCALLLM_ISA in an AVX-512 build: the AVX2 kernels were compiled with AVX-512's
        # 32 registers, which an AVX2 CPU's own build (-march=native there) does not have.
        isa += " (capped; compiled for AVX-512)"
    return isa


LLAMACPP_FEATURES = ("AVX2", "AVX512", "AVX512_VNNI", "AMX_INT8", "NEON", "DOTPROD", "MATMUL_INT8", "SVE")


def llamacpp_isa(venv_python: str) -> str:
    """The features llama.cpp's own system info reports as on (=1), from a venv process."""
    code = ("import llamacpp_venv as v; print(v.llamacpp_system_info())")
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([venv_python, "-c", code], capture_output=True, text=True, cwd=here,
                          env={**os.environ, "PYTHONPATH": here})
    info = proc.stdout if proc.returncode == 0 else ""
    on = [f for f in LLAMACPP_FEATURES if f" {f} = 1" in f" {info.replace('|', ' ')}"]
    return " ".join(on) or "unknown"


def describe(threads: int, venv_python: str | None = None, read_bw_gbs: float | None = None) -> dict:
    from localllm import _harness
    if read_bw_gbs is None:
        read_bw_gbs = max(_harness.read_bandwidth(1 << 30, threads) for _ in range(3))
    out = {"cpu": cpu_model(), "localllm_isa": localllm_isa(), "threads": threads,
           "read_bw_gbs": round(read_bw_gbs, 1)}
    if venv_python:
        out["llamacpp_isa"] = llamacpp_isa(venv_python)
    return out


def line(m: dict) -> str:
    llama = f"; llama.cpp uses {m['llamacpp_isa']}" if "llamacpp_isa" in m else ""
    return (f"machine: {m['cpu']}; localllm kernels {m['localllm_isa']}{llama}; {m['threads']} threads; "
            f"read bandwidth {m['read_bw_gbs']} GB/s")


if __name__ == "__main__":
    print(json.dumps(describe(2)))
