"""The portable build (CMake LOCALLLM_PORTABLE=ON, the wheels: docs/install.md).

- The loader's choice (python/localllm/_core_variant.py): the fastest variant the CPU runs, and
  a clear ImportError, never a SIGILL, for a variant the CPU cannot run.
- Where a portable build tree exists (build/portable, or the folder LOCALLLM_PORTABLE_BUILD names;
  tests/portable_check.sh builds one):
  * no variant holds an instruction above its level (the disassembly's registers), so no code
    compiled for a higher level can reach a lower variant;
  * each variant this CPU runs gives, at its own kernel level, the logits of the native build
    (-march=native) bit for bit, where the native build targets the same level (at capped levels
    within the compiler tuning's FMA contraction, see the test);
  * under qemu-user, a CPU without AVX (Nehalem) loads the baseline variant and a CPU without
    AVX-512 (Haswell) the avx2 one, and each gives that variant's logits (run natively) bit for bit.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from localllm import _core, _core_variant
from localllm._core_variant import VARIANTS, choose

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("LOCALLLM_PORTABLE_BUILD", REPO / "build" / "portable"))
LEVELS = {"baseline": ["scalar"], "avx2": ["scalar", "avx2"], "avx512": ["scalar", "avx2", "avx512"]}


def test_the_fastest_runnable_variant_present_is_chosen() -> None:
    assert choose(["baseline", "avx2"], list(VARIANTS), None) == "avx2"
    assert choose(["baseline", "avx2", "avx512"], ["baseline", "avx2"], None) == "avx2"
    assert choose(["baseline", "avx2", "avx512"], list(VARIANTS), None) == "avx512"
    assert choose(["baseline", "avx2"], list(VARIANTS), "baseline") == "baseline"


def test_a_variant_the_cpu_cannot_run_is_refused_by_name() -> None:
    with pytest.raises(ImportError, match="needs an x86-64-v2 CPU"):
        choose([], list(VARIANTS), None)
    with pytest.raises(ImportError, match="'avx512': this CPU cannot run it"):
        choose(["baseline", "avx2"], list(VARIANTS), "avx512")
    with pytest.raises(ImportError, match="'avx3' names no variant"):
        choose(["baseline"], list(VARIANTS), "avx3")
    with pytest.raises(ImportError, match="has no such variant"):
        choose(["baseline", "avx2"], ["baseline"], "avx2")


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A copy of python/localllm with the portable tree's modules in place of the native ones."""
    variants = BUILD / "_variants"
    if not list(variants.glob("_cpu_probe*.so")):
        pytest.skip(f"no portable build in {BUILD} (tests/portable_check.sh builds one)")
    root = tmp_path_factory.mktemp("portable")
    shutil.copytree(REPO / "python" / "localllm", root / "localllm",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "_variants"))
    shutil.copytree(variants, root / "localllm" / "_variants")
    return root


def runnable_here(package: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", "import localllm, localllm._core_variant as v; "
                           "print(*v._probe_runnable())"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(package)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


# Registers only a level's instructions can name: YMM needs AVX; ZMM, opmask k1-k7 and the 16 upper
# vector registers (EVEX only) need AVX-512; tiles need AMX.
ABOVE = {"baseline": r"%[yz]mm|%k[1-7]\b|%tmm|\btile", "avx2": r"%zmm|%k[1-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b|%tmm|\btile"}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.parametrize("variant", ["baseline", "avx2"])
def test_no_variant_holds_an_instruction_above_its_level(package: Path, variant: str) -> None:
    modules = sorted((package / "localllm" / "_variants" / variant).glob("*.so"))
    if variant == "baseline":   # the probe runs before any variant is chosen
        modules += sorted((package / "localllm" / "_variants").glob("_cpu_probe*.so"))
    assert modules
    for module in modules:
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(module)], capture_output=True,
                              text=True, check=True).stdout
        assert text.count("\n") > 1000
        above = [line for line in text.splitlines() if re.search(ABOVE[variant], line)]
        assert not above, f"{module.name} ({variant}): {above[:5]}"


LOGITS = """
import sys
import numpy as np
import localllm
from localllm import LLM, _core, _core_variant
llm = LLM(sys.argv[1], n_threads=2, n_ctx=128)
np.save(sys.argv[2], np.asarray(llm.logits(llm.tokenize("The capital of France is Paris, and the capital of Italy is"))))
print(_core_variant.loaded, _core.build_target(), _core.isa_name(_core.best_isa()))
"""


def logits(out: Path, package: Path | None, prefix: tuple = (), **env: str) -> tuple[np.ndarray, list[str]]:
    from conftest import model_file
    run_env = {**os.environ, **env}
    if package is not None:
        run_env["PYTHONPATH"] = str(package)
    proc = subprocess.run([*prefix, sys.executable, "-c", LOGITS, str(model_file("smollm2-135m-q4_1")), str(out)],
                          capture_output=True, text=True, env=run_env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(out), proc.stdout.split()


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_gives_the_native_logits_at_its_level(package: Path, variant: str, tmp_path) -> None:
    """At the variant's own kernel level (the one it runs uncapped) its logits are the native
    build's bit for bit: the kernels are intrinsics, and the code around them is contracted into
    FMA alike. At a capped level the scalar loops' FMA contraction follows the compiler's tuning:
    -march=native on AMD Zen (-mtune=znver*) leaves FMA chains in loops uncontracted
    (--param avoid-fma-max-bits=256), the variants' generic tuning contracts them, so there the
    logits may differ in the last bits (5.7e-6 measured on Zen 3 with SmolLM2, 2026-12-06)."""
    if _core_variant.loaded is not None or _core.build_target() != variant:
        pytest.skip(f"the native build here targets {_core.build_target()}, not {variant}")
    if variant not in runnable_here(package):
        pytest.skip(f"this CPU does not run the {variant} variant")
    for level in LEVELS[variant]:
        native, _ = logits(tmp_path / f"native-{level}.npy", None, LOCALLLM_ISA=level)
        portable, info = logits(tmp_path / f"{variant}-{level}.npy", package, LOCALLLM_VARIANT=variant,
                                LOCALLLM_ISA=level)
        assert info == [variant, variant, level]
        assert native.shape[0] > 8
        if level == LEVELS[variant][-1]:
            assert np.array_equal(native, portable), level
        else:
            assert np.abs(native - portable).max() < 1e-4, level
            assert np.array_equal(native.argmax(-1), portable.argmax(-1)), level


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="qemu-user (qemu-x86_64) is not installed")
@pytest.mark.parametrize("cpu,variant", [("Nehalem", "baseline"), ("Haswell", "avx2")])
def test_an_older_cpu_loads_its_variant_and_gives_its_logits(package: Path, cpu: str, variant: str, tmp_path) -> None:
    if variant not in runnable_here(package):
        pytest.skip(f"this CPU does not run the {variant} variant natively, to compare with")
    here, _ = logits(tmp_path / "here.npy", package, LOCALLLM_VARIANT=variant)
    emulated, info = logits(tmp_path / "qemu.npy", package, ("qemu-x86_64", "-cpu", cpu))
    assert info[:2] == [variant, variant]
    assert np.array_equal(here, emulated)
