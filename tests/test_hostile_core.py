"""Regressions for hostile use of the C++ core: thread creation the OS refuses, two
threads in one Model, the llama.cpp-numerics attention path's index checks, a KV cache larger
than the machine's memory. Each case that once crashed the process runs in a subprocess, so a
regression fails this test instead of killing pytest."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import localllm
from conftest import model_file
from localllm import _core

SMOL = "smollm2-135m-q4_1"
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


def run_isolated(code: str, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run Python code in a fresh interpreter that imports this checkout's localllm (env: extra
    variables)."""
    python_dir = Path(localllm.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(python_dir), os.environ.get("PYTHONPATH", "")]),
               **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Threads

def test_thread_count_beyond_the_limit_is_refused():
    with pytest.raises(ValueError, match="n_threads must be in 1..4096, got 100000"):
        _core.Model(str(model_file(SMOL)), 100_000, 8)


@pytest.mark.skipif(UNDER_ASAN, reason="ASan reserves terabytes of address space: RLIMIT_AS cannot apply")
def test_thread_creation_refused_by_the_os_is_an_error():
    """With the address space capped, thread stacks run out after a few dozen threads: the pool
    stops the threads it started and raises (it once crashed the process)."""
    out = run_isolated("""
        import resource, sys
        from localllm import _core
        vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
        limit = vm + (400 << 20)    # the model's mapping fits, 4000 thread stacks of 8 MB do not
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            _core.Model(sys.argv[1], 4000, 8)
        except RuntimeError as e:
            print("RuntimeError", e)
        m = _core.Model(sys.argv[1], 2, 8)     # the process is still usable
        print("loaded", m.hparams["n_layer"])
    """, str(model_file(SMOL)), env={"MALLOC_ARENA_MAX": "1"})
    # One malloc arena: glibc gives each thread that allocates an arena of its own (64 MiB of
    # address space, up to 8 per core) that outlives the thread. On a loaded machine more of the
    # 4000 threads ran before a stack failed, and their arenas took the margin the second model
    # needs (1 run in 6 failed so); with one, the margin is the thread stacks' alone.
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("RuntimeError ThreadPool: could not start thread "), out.stdout
    assert "of 4000" in lines[0] and "use fewer threads" in lines[0]
    assert lines[1] == "loaded 30"


# ---------------------------------------------------------------------------------------------
# Two threads in one Model

def prompt_batch(n_tokens: int):
    tokens = (np.arange(n_tokens, dtype=np.int32) * 37 + 5) % 49152
    positions = np.arange(n_tokens, dtype=np.int32)
    seq = np.zeros(n_tokens, np.int32)
    tables = np.arange(1, 1 + -(-n_tokens // 16), dtype=np.int32)[None, :]
    rows = np.array([n_tokens - 1], np.int32)
    return tokens, positions, seq, tables, rows


CONCURRENT_FORWARD = """
    import sys, threading
    import numpy as np
    from localllm import _core
    sys.path.insert(0, sys.argv[2])
    from test_hostile_core import prompt_batch
    model = _core.Model(sys.argv[1], 2, 40)
    batch = prompt_batch(64)
    expected = model.forward(*batch).copy()
    refused, exact, errors = [], [], []
    start = threading.Barrier(2)

    def worker():
        start.wait()
        for _ in range(6):
            try:
                exact.append(np.array_equal(model.forward(*batch), expected))
            except RuntimeError as e:
                refused.append(str(e))
            except Exception as e:
                errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("errors", errors)
    print("exact", len(exact), all(exact))
    print("refused", len(refused), all("already running a call in another thread" in r for r in refused))
    hold = threading.Thread(target=lambda: model.forward(*prompt_batch(256)))
    hold.start()
    try:
        for _ in range(100_000):
            model.copy_block(1, 2)
        print("copy_block never refused")
    except RuntimeError as e:
        print("copy_block refused", e)
    hold.join()
"""


def test_second_thread_in_forward_is_refused():
    """One Model serves one forward at a time: a second thread gets RuntimeError (it once hung or
    crashed), and the calls that ran give exact logits. In a subprocess: a hang fails the test."""
    out = run_isolated(CONCURRENT_FORWARD, str(model_file(SMOL)), str(Path(__file__).parent), timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "errors []", out.stdout
    n_exact, all_exact = lines[1].split()[1:]
    n_refused, all_named = lines[2].split()[1:]
    assert int(n_exact) >= 1 and all_exact == "True", out.stdout
    assert int(n_refused) >= 1 and all_named == "True", out.stdout
    assert lines[3].startswith("copy_block refused Model.copy_block: the model is already running"), out.stdout


# ---------------------------------------------------------------------------------------------
# The llama.cpp-numerics attention path checks what it indexes, as the fast path does

def attention_case(n_head: int, n_head_kv: int, hd: int = 16):
    rng = np.random.default_rng(0)
    T = 4
    q = rng.standard_normal((T, n_head, hd)).astype(np.float32)
    k = rng.standard_normal((T, n_head_kv, hd)).astype(np.float32)
    return dict(q=q, k=k, v=k.copy(), positions=np.arange(T, dtype=np.int32), seq_of_token=np.zeros(T, np.int32),
                block_tables=np.array([[0]], np.int32), n_blocks=1, block_size=16,
                query_rows=np.arange(T, dtype=np.int32), scale=0.25)


ATTENTION_CODE = """
    import sys, numpy as np
    from localllm import _harness
    sys.path.insert(0, sys.argv[1])
    from test_hostile_core import attention_case
    case = {case}
    for numerics in ("fast", "llama.cpp"):
        for kernel in (-1, 0):
            try:
                _harness.attention_test(**case, kernel=kernel, numerics=numerics)
                print("accepted", numerics)
            except ValueError as e:
                print("ValueError", numerics, e)
"""

BAD_ATTENTION = {
    # fewer query heads than kv heads: group = 0, a division by zero (SIGFPE)
    "n_head < n_head_kv": ("attention_case(1, 2)", "is not a positive multiple of n_head_kv 2"),
    # 3 query heads over 2 kv heads: head 2 read kv head 2 of a 2-head cache
    "n_head not a multiple": ("attention_case(3, 2)", "n_head 3 is not a positive multiple"),
    # a query at position 40 with keys 0..39 unwritten: their block-table entries are -1
    "visible block missing": ("dict(attention_case(2, 1), positions=np.array([0, 1, 2, 40], np.int32), "
                              "block_tables=np.array([[0, -1, 0]], np.int32))",
                              "has an invalid block id at 1"),
}


@pytest.mark.parametrize("name", list(BAD_ATTENTION))
def test_llamacpp_attention_checks_indexes(name):
    case, needle = BAD_ATTENTION[name]
    out = run_isolated(ATTENTION_CODE.format(case=case), str(Path(__file__).parent))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 4, out.stdout
    assert all(line.startswith("ValueError") and needle in line for line in lines), out.stdout


# ---------------------------------------------------------------------------------------------
# KV cache larger than the machine's memory

def test_kv_cache_beyond_physical_memory_is_refused_before_allocating():
    """A cache one block past the machine's memory is an error, not the OOM killer (isolated: a
    regression would take the process down)."""
    out = run_isolated("""
        import os, sys
        from localllm import _core
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        # SmolLM2: 30 layers x 3 kv heads x 64 dims x 2 (K, V) x 2 bytes = 23040 bytes per token
        blocks = ram // (23040 * 16) + 1
        try:
            _core.Model(sys.argv[1], 1, blocks)
        except ValueError as e:
            print("ValueError", e)
    """, str(model_file(SMOL)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ValueError kv cache: "), out.stdout
    assert "exceeds this machine's memory" in out.stdout
