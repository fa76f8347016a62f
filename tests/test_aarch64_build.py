"""The aarch64 cross build (scripts/build_aarch64.sh), inspected from this machine: the instructions
beyond armv8-a lie only in the dotprod and i8mm kernels, which run where the CPU reports
FEAT_DotProd / FEAT_I8MM, so a plain armv8-a CPU (Cortex-A53, Raspberry Pi 3) never meets one. Runs where that build exists
(build/aarch64, or LOCALLLM_AARCH64_BUILD) and binutils' aarch64 objdump is installed (Debian's
g++-aarch64-linux-gnu brings it); its
behaviour under emulation is tests/aarch64_check.sh's.

dot_dotprod.cpp and dot_i8mm.cpp compile their kernels under `#pragma GCC target("arch=armv8.2-a+
dotprod(+i8mm)")`, after every header, inside a namespace of their own: what is checked here is that no other function (an
inline function of a header, a standard library template) was compiled with that target and
kept by the linker.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("LOCALLLM_AARCH64_BUILD", REPO / "build" / "aarch64"))
OBJDUMP = shutil.which("aarch64-linux-gnu-objdump")
# The core's objects, as compiled (the linked modules are stripped: no function names to check).
OBJECTS = sorted((BUILD / "CMakeFiles" / "localllm_core.dir").rglob("*.cpp.o"))

pytestmark = pytest.mark.skipif(not OBJECTS or not OBJDUMP,
                                reason="no aarch64 build here (scripts/build_aarch64.sh) or no aarch64-linux-gnu-objdump")

# Instructions of FEAT_DotProd and FEAT_I8MM, and of extensions GCC could pick under armv8.2-a:
# LSE atomics (cas, ldadd, swp ...), RDM (sqrdmlah / sqrdmlsh), FP16 arithmetic on h registers.
BEYOND_V8 = re.compile(r"\t(sdot|udot|usdot|sudot|smmla|ummla|usmmla|cas[a-z]*|ldadd[a-z]*|ldclr[a-z]*|ldset[a-z]*|"
                       r"ldeor[a-z]*|swp[a-z]*|sqrdmlah|sqrdmlsh)\s")
KERNELS = re.compile(r"(dotprod|i8mm)_impl")
# libgcc's outline atomics (GCC's default on aarch64 Linux): each checks for LSE at run time.
OUTLINE_ATOMICS = re.compile(r"^__aarch64_(cas|ldadd|ldclr|ldeor|ldset|swp)")


def functions_using_v82(obj: Path) -> dict[str, set[str]]:
    """{demangled function: the beyond-armv8.0 mnemonics in it} for one object file."""
    out = subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", "-C", str(obj)], capture_output=True,
                         text=True, check=True).stdout
    found: dict[str, set[str]] = {}
    current = "?"
    for line in out.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if header:
            current = header.group(1)
            continue
        m = BEYOND_V8.search(line)
        if m:
            found.setdefault(current, set()).add(m.group(1))
    return found


def test_only_the_dotprod_and_i8mm_kernels_go_beyond_armv8() -> None:
    """Every function of every object of the core (weak copies of inline functions included:
    the ones the linker may keep) is armv8.0-a, except those of the two kernel namespaces."""
    found = {obj.name: functions_using_v82(obj) for obj in OBJECTS}
    dotprod = found.get("dot_dotprod.cpp.o", {})
    i8mm = found.get("dot_i8mm.cpp.o", {})
    assert any("dotprod_impl" in f and "sdot" in ops for f, ops in dotprod.items()), "no sdot in the dotprod kernels"
    assert any("i8mm_impl" in f and "smmla" in ops for f, ops in i8mm.items()), "no smmla in the i8mm kernels"
    stray = {(obj, f): ops for obj, fns in found.items() for f, ops in fns.items()
             if not KERNELS.search(f) and not OUTLINE_ATOMICS.match(f)}
    assert not stray, f"armv8.2-a instructions outside the dotprod / i8mm kernels: {stray}"
