"""Every kernel path on any machine: LOCALLLM_ISA=scalar|avx2|avx512 caps the level a process
uses (and LOCALLLM_NO_AMX=1 turns AMX off), so the lower paths run end to end on a machine that
has the higher ones, and each path is held to its own reference.

- Kernel level: at every level this CPU has, matmul at M = 1, 16, 17, 32, 64, 128 equals the
  level's one-row dot product (vec_dot) on every row; the repacked panels (AVX-512 and AVX2,
  every block-sequential type) equal the GGUF rows' kernel, and the portable
  repacker writes the AVX-512 one's bytes; AMX, where granted, equals the VNNI kernels of a
  process with AMX off.
- Model level: the fidelity checks against llama.cpp run again in a process capped at AVX2 (its
  rounding order is its own; the thresholds measured there are the fast path's, see
  test_fidelity.py), and SmolLM2 in a process capped at the scalar kernels.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from localllm import _core, _harness
from test_kernels import ALL_TYPES, VEC_DOT_TYPE, T, make_acts, make_weights

REPO = Path(__file__).resolve().parent.parent
ISAS = [i for i in range(3) if _core.isa_available(i)]
# 1-16 (Q6_K: 1-8): panels replayed into the fold; 16-63: AMX tiles from the repacked panels
# (Q8_0) with a VNNI or zero-padded tail; 64 and more: 64-row tiles; VNNI pair kernels the rest.
ROWS = (1, 5, 8, 9, 13, 16, 17, 31, 32, 35, 48, 50, 64, 90, 96, 128)
BSEQ_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


@pytest.mark.parametrize("isa", ISAS, ids=lambda i: _core.isa_name(i))
@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_matmul_rows_equal_the_levels_vec_dot(t: T, isa: int) -> None:
    rng = np.random.default_rng(int(t) * 7 + isa)
    n, k = 19, 512
    w = make_weights(t, n, k, rng)
    x = make_acts(max(ROWS), k, rng)
    for m in ROWS:
        y = _harness.matmul(w, int(t), n, k, x[:m], 2, isa)
        for i in sorted({0, m // 2, m - 1}):
            xq = _harness.quantize_act(x[i], int(VEC_DOT_TYPE[t]), isa)
            dots = np.array([_harness.vec_dot(int(t), w[j], xq, k, isa) for j in range(n)], np.float32)
            assert np.array_equal(y[i], dots), f"{_core.isa_name(isa)} M={m} row {i}"


# Both SIMD levels run every block-sequential type from the same repacked panels
# (quants/bseq_avx512.cpp, quants/bseq_avx2.cpp).
REPACKED = [(isa, t) for isa in ISAS if isa >= 1 for t in BSEQ_TYPES]


@pytest.mark.parametrize("isa,t", REPACKED, ids=lambda v: v.name if isinstance(v, T) else _core.isa_name(v))
def test_repacked_panels_equal_gguf_rows_at_every_row_count(isa: int, t: T) -> None:
    rng = np.random.default_rng(int(t) + 900)
    n, k = 40, 512
    w = make_weights(t, n, k, rng)
    x = make_acts(max(ROWS), k, rng)
    for m in ROWS:
        assert np.array_equal(_harness.matmul_repacked(w, int(t), n, k, x[:m], 2, isa=isa),
                              _harness.matmul(w, int(t), n, k, x[:m], 2, isa)), f"M={m}"


PORTABLE_REPACK = """
import numpy as np, sys
sys.path.insert(0, {tests!r})
from localllm import _core, _harness
from test_kernels import make_weights, T
rng = np.random.default_rng(5)
np.savez({path!r}, **{{str(t): _harness.repack_weight(make_weights(T(t), 37, 512, rng), t, 37, 512, 2) for t in {types}}})
"""


@pytest.mark.skipif(not _core.isa_available(2), reason="the AVX-512 repacker is the reference; this CPU lacks it")
def test_portable_repack_writes_the_avx512_panels(tmp_path) -> None:
    """CPUs without AVX-512 repack in plain C++: byte for byte the same panels (37 rows: the
    last panel repeats its last row)."""
    path = tmp_path / "avx2.npz"
    types = [int(t) for t in BSEQ_TYPES]
    proc = run_python(PORTABLE_REPACK.format(tests=str(REPO / "tests"), path=str(path), types=types),
                      LOCALLLM_ISA="avx2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    portable = np.load(path)
    rng = np.random.default_rng(5)
    for t in types:
        expected = _harness.repack_weight(make_weights(T(t), 37, 512, rng), t, 37, 512, 2)
        assert np.array_equal(portable[str(t)], expected), T(t).name


AMX_VS_VNNI = """
import numpy as np, sys
sys.path.insert(0, {tests!r})
from localllm import _core, _harness
from test_kernels import make_acts, make_weights, T
rng = np.random.default_rng(11)
out = {{}}
for t, n, k in [(t, 40, 512) for t in {types}] + [(int(T.Q8_0), 200, 640)]:
    w = make_weights(T(t), n, k, rng)
    x = make_acts(128, k, rng)
    out[f"{{t}}_{{n}}"] = np.stack([np.pad(_harness.matmul_repacked(w, t, n, k, x[:m], 2), ((0, 128 - m), (0, 0)))
                                   for m in {rows}])
np.savez({path!r}, amx=np.array(_core.amx_available()), **out)
"""


@pytest.mark.skipif(not _core.amx_available(), reason="this CPU or OS grants no AMX: nothing to compare")
def test_amx_equals_vnni(tmp_path) -> None:
    """The same inputs through a process with AMX and one with LOCALLLM_NO_AMX=1 (VNNI panels)."""
    results = {}
    for label, env in (("amx", {}), ("vnni", {"LOCALLLM_NO_AMX": "1"})):
        path = tmp_path / f"{label}.npz"
        code = AMX_VS_VNNI.format(tests=str(REPO / "tests"), types=[int(t) for t in BSEQ_TYPES],
                                  rows=list(ROWS), path=str(path))
        proc = run_python(code, **env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[label] = np.load(path)
    assert bool(results["amx"]["amx"]) and not bool(results["vnni"]["amx"])
    # Q8_0 at 200 x 640: runs of four panels (16 rows and more read tiles straight from the
    # repacked panels), a partial run and a partial panel.
    for key in [f"{int(t)}_40" for t in BSEQ_TYPES] + [f"{int(T.Q8_0)}_200"]:
        assert np.array_equal(results["amx"][key], results["vnni"][key]), key


AVX2_LOGITS = """
import numpy as np
from localllm import LLM
llm = LLM({path!r}, n_threads=2, n_ctx=256)
np.save({out!r}, np.asarray(llm.logits(llm.tokenize({text!r}))))
"""


@pytest.mark.skipif(not _core.isa_available(2), reason="no AVX-512 here to compare the AVX2 path with")
@pytest.mark.parametrize("key", ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"])
def test_avx2_gives_the_avx512_logits(tmp_path, key: str) -> None:
    """Every matrix of the three models is of a block-sequential type (Q4_1, Q5_0, Q8_0, Q4_K,
    Q6_K), which both levels run in the one order of quants/bseq.h, and the other ops are bit-exact
    to their scalar statements at each level: a process capped at AVX2 gives the AVX-512
    process's logits bit for bit, at every position."""
    from conftest import model_file
    path, text = str(model_file(key)), "The quick brown fox jumps over the lazy dog. " * 6
    logits = {}
    for level in ("avx2", "avx512"):
        out = tmp_path / f"{level}.npy"
        proc = run_python(AVX2_LOGITS.format(path=path, out=str(out), text=text), LOCALLLM_ISA=level)
        assert proc.returncode == 0, proc.stderr[-2000:]
        logits[level] = np.load(out)
    assert logits["avx2"].shape[0] > 50
    assert np.array_equal(logits["avx2"], logits["avx512"])


def test_isa_cap_is_honoured_and_checked() -> None:
    probe = ("from localllm import _core, _harness; print(_core.best_isa(), _core.amx_available(), "
             "_harness.attention_avx512_available())")
    for level in ISAS:
        proc = run_python(probe, LOCALLLM_ISA=_core.isa_name(level))
        best, amx, attn = proc.stdout.split()
        assert int(best) == level
        if level < 2:
            assert amx == "False" and attn == "False"
    proc = run_python("from localllm import _core; _core.best_isa()", LOCALLLM_ISA="avx3")
    assert proc.returncode != 0 and "LOCALLLM_ISA='avx3' names no kernel level" in proc.stderr


def test_build_target_names_what_the_compiler_targeted() -> None:
    # A level the build was not compiled for cannot run; one it was compiled for runs on a CPU
    # that has it, cap or none. (benchmarks/machine.py prints this beside capped AVX2 figures.)
    target = _core.build_target()
    assert target in ("avx512", "avx2", "baseline")
    uncapped = run_python("from localllm import _core; print(_core.isa_available(1), _core.isa_available(2))",
                          LOCALLLM_ISA="avx512").stdout.split()
    if uncapped[1] == "True":
        assert target == "avx512"
    if target != "baseline":
        assert uncapped[0] == "True"
    else:
        assert uncapped == ["False", "False"]


def run_tests(level: str, files: list[str], selection: str | None = None) -> None:
    args = [str(REPO / "tests" / f) for f in files] + (["-k", selection] if selection else [])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "LOCALLLM_ISA": level})
    assert proc.returncode == 0, proc.stdout[-4000:]


def run_fidelity(level: str, selection: str) -> None:
    run_tests(level, ["test_fidelity.py"], selection)


@pytest.mark.skipif(not _core.isa_available(1) or _core.best_isa() == 1,
                    reason="the AVX2 path is the default here (test_fidelity.py runs it) or absent")
def test_fidelity_on_the_avx2_path() -> None:
    run_fidelity("avx2", "teacher_forced or greedy_continuations")


@pytest.mark.skipif(not _core.isa_available(1) or _core.best_isa() == 1,
                    reason="the AVX2 path is the default here (the files run it directly) or absent")
def test_llamacpp_numerics_on_the_avx2_path() -> None:
    """The llama.cpp-order kernels' AVX2 paths: bit for bit their scalar statements, and the
    forward bit for bit llama.cpp's logits, on a CPU whose default is AVX-512."""
    run_tests("avx2", ["test_llamacpp_numerics.py", "test_ggml_q4k.py", "test_ggml_q6k.py"])
    run_fidelity("avx2", "llamacpp_numerics_logits")


def test_fidelity_on_the_scalar_path() -> None:
    run_fidelity("scalar", "teacher_forced and smollm2")
