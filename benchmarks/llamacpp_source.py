"""The llama.cpp source every benchmark builds: llama-cpp-python 0.3.36's sdist, which vendors
llama.cpp, unpacked once into ~/.cache/localllm/llama-server/src/ (LOCALLLM_LLAMA_SERVER_DIR
elsewhere) and given one fix of ours so that its AMX path runs at all.

The fix. ggml's `ggml_tile_config_init` (ggml-cpu/amx/mmq.cpp) fills a tile configuration on the
stack and hands it to `_tile_loadconfig`. GCC 12 does not treat that intrinsic as a read of the
memory, drops the stores as dead, and `ldtilecfg` loads stack garbage: a native llama.cpp built
here died in its first prompt on a Sapphire Rapids class Xeon (SIGSEGV at `ldtilecfg` in a worker
thread, SIGILL at `tilezero` in llama-server's warm-up; 2026-12-04). Upstream knows the bug
(llama.cpp pull request 26954, open). A compiler barrier naming the configuration's address keeps
the stores; nothing else in llama.cpp changes, so its AMX kernels run as their authors wrote them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
ROOT = Path(os.environ.get("LOCALLLM_LLAMA_SERVER_DIR", Path.home() / ".cache" / "localllm" / "llama-server"))

AMX_FIX_FILE = Path("ggml/src/ggml-cpu/amx/mmq.cpp")
AMX_FIX_ANCHOR = "    _tile_loadconfig(&tc);\n"
AMX_FIX = ('    __asm__ __volatile__("" : : "r"(&tc) : "memory");  // localllm: keep the stores (GCC)\n'
           + AMX_FIX_ANCHOR)
# Part of every build stamp, so that a build from the unfixed source is rebuilt.
SOURCE_TAG = f"{LLAMA_CPP_PYTHON}+amx-tile-config-fix"


def _sdist() -> Path:
    """The llama-cpp-python sdist (a .tar.gz), downloaded through pip once."""
    dl = ROOT / "sdist"
    found = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        dl.mkdir(parents=True, exist_ok=True)
        # Only this package as source; its build backend (scikit-build-core) is not built from
        # source too, as ":all:" would do. pip reads the sdist's metadata with that backend, in an
        # isolated environment: this interpreter need not have it.
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                        "-d", str(dl), LLAMA_CPP_PYTHON], check=True)
        found = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise RuntimeError(f"pip download of {LLAMA_CPP_PYTHON} left no sdist in {dl}")
    return found[-1]


def package_source() -> Path:
    """The unpacked llama-cpp-python package (what pip installs), its llama.cpp fixed."""
    src_root = ROOT / "src"
    hits = list(src_root.glob("llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt"))
    if not hits:
        src_root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(_sdist()) as tar:
            tar.extractall(src_root, filter="data")
        hits = list(src_root.glob("llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt"))
    if not hits:
        raise RuntimeError(f"no vendor/llama.cpp in the {LLAMA_CPP_PYTHON} sdist")
    _apply_amx_fix(hits[0].parent)
    return hits[0].parent.parent.parent


def llama_cpp_source() -> Path:
    """The vendored llama.cpp tree (vendor/llama.cpp), fixed."""
    return package_source() / "vendor" / "llama.cpp"


def _apply_amx_fix(llama_cpp: Path) -> None:
    path = llama_cpp / AMX_FIX_FILE
    text = path.read_text()
    if AMX_FIX in text:
        return
    if text.count(AMX_FIX_ANCHOR) != 1:
        raise RuntimeError(f"{path}: the line the AMX fix goes before is not there once; "
                           f"is this still {LLAMA_CPP_PYTHON}?")
    path.write_text(text.replace(AMX_FIX_ANCHOR, AMX_FIX))
