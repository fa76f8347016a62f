"""Which compiled core this process loads.

A source build (`pip install .`) has one core, python/localllm/_core*.so, compiled for the CPU it
was built on (-march=native). The portable build (CMake LOCALLLM_PORTABLE=ON: the wheels, see
docs/install.md) has one per CPU level under _variants/<name>/, each the whole core compiled with
its own -march, and a probe compiled for plain x86-64 that says which of them this CPU and OS run
(CPUID and XGETBV). `select()` puts the fastest runnable variant's folder first on the package's
search path (on import of this module, which localllm/__init__.py does first), so
`from localllm import _core` (and `_harness`, when built) load from there.

LOCALLLM_VARIANT=baseline|avx2|avx512 picks one (tests run the lower variants on a faster CPU);
naming one this CPU cannot run is an error, not a crash on the first unknown instruction.
"""
from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, FileFinder
from importlib.util import module_from_spec
from pathlib import Path

VARIANTS = ("baseline", "avx2", "avx512")   # slowest first
VARIANTS_DIR = Path(__file__).resolve().parent / "_variants"

loaded: str | None = None   # the variant select() chose; None for a source build's single core


def choose(runnable: list[str], present: list[str], forced: str | None) -> str:
    """The variant to load: `forced` if given (and runnable), else the fastest runnable one present."""
    if forced:
        if forced not in VARIANTS:
            raise ImportError(f"LOCALLLM_VARIANT={forced!r} names no variant (one of {', '.join(VARIANTS)})")
        if forced not in present:
            raise ImportError(f"LOCALLLM_VARIANT={forced!r}: this installation has no such variant "
                              f"(it has {', '.join(present) or 'none'})")
        if forced not in runnable:
            raise ImportError(f"LOCALLLM_VARIANT={forced!r}: this CPU cannot run it "
                              f"(it runs {', '.join(runnable) or 'none'})")
        return forced
    usable = [v for v in VARIANTS if v in runnable and v in present]
    if not usable:
        raise ImportError("localllm's portable build needs an x86-64-v2 CPU (SSE4.2, POPCNT, CX16) "
                          f"and this one is not (variants runnable here: {', '.join(runnable) or 'none'}); "
                          "build localllm from source instead (pip install . in its repository; docs/install.md)")
    return usable[-1]


def _probe_runnable() -> list[str]:
    finder = FileFinder(str(VARIANTS_DIR), (ExtensionFileLoader, EXTENSION_SUFFIXES))
    spec = finder.find_spec("localllm._cpu_probe")
    if spec is None:
        raise ImportError(f"localllm's portable build is incomplete: no _cpu_probe module in {VARIANTS_DIR}")
    probe = module_from_spec(spec)
    spec.loader.exec_module(probe)
    return list(probe.runnable_variants())


def select(package_path: list[str]) -> str | None:
    """Put the chosen variant's folder first on `package_path`; None when there are no variants."""
    global loaded
    if not VARIANTS_DIR.is_dir():
        return None
    present = [v for v in VARIANTS if any((VARIANTS_DIR / v / f"_core{suffix}").is_file()
                                          for suffix in EXTENSION_SUFFIXES)]
    loaded = choose(_probe_runnable(), present, os.environ.get("LOCALLLM_VARIANT"))
    package_path.insert(0, str(VARIANTS_DIR / loaded))
    return loaded


# Imported by the package's __init__ before _core: the package is on sys.modules, its __path__ set.
select(sys.modules[__package__].__path__)
