"""What every atheris harness here shares: the seed corpus it writes itself, libFuzzer's
options (per-input timeout, RSS bound) and the accepted exceptions.

A harness is run as a script:

    python tests/fuzz/fuzz_gguf.py -runs=1000000          # normal build (PYTHONPATH as usual)
    tests/sanitize.sh --fuzz fuzz_gguf.py -runs=1000000     # on the ASan+UBSan build

Its corpus lives in build/fuzz/<name> (seeded on first use, grown by libFuzzer). A finding is
anything but the harness's expected exceptions: another exception (a traceback a user would
see), a sanitizer report, a crash, an input over the timeout or the RSS bound. libFuzzer then
writes the input to crash-*/timeout-*/oom-* in the working directory and stops.
"""
from __future__ import annotations

import os
import re
import sys
import zlib
from pathlib import Path
from typing import Callable, Iterable

import atheris

REPO = Path(__file__).resolve().parents[2]
# Defaults that make a slow or memory-hungry input a finding (each can be overridden on the
# command line, libFuzzer takes the last value given).
DEFAULT_OPTIONS = ["-timeout=10", "-rss_limit_mb=3072", "-max_len=65536"]
# Python code whose coverage guides the fuzzer (native coverage needs the sanitizer build).
INSTRUMENTED = ["localllm", "localllm_convert", "jinja2"]


def corpus_dir(name: str, seeds: Iterable[bytes]) -> Path:
    """build/fuzz/<name>, written with the seeds when it does not exist yet."""
    path = REPO / "build" / "fuzz" / name
    if not path.is_dir():
        path.mkdir(parents=True)
        for i, seed in enumerate(seeds):
            (path / f"seed-{i:03d}").write_bytes(seed)
    return path


def run(name: str, seeds: Callable[[], Iterable[bytes]], test_one_input: Callable[[bytes], None]) -> None:
    """Run libFuzzer on test_one_input over build/fuzz/<name> (plus any corpus given)."""
    args = list(sys.argv)
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(str(corpus_dir(name, seeds())))
    atheris.Setup([args[0], *DEFAULT_OPTIONS, *args[1:]], test_one_input)
    atheris.Fuzz()


def scratch_file(name: str) -> str:
    """A per-process file for inputs that must be paths (tmpfs when there is one)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return os.path.join(base, f"localllm-fuzz-{name}-{os.getpid()}")


# Coverage for outcomes the instrumentation cannot see. The GGUF reader and the model loader are
# native code, and their coverage only reaches libFuzzer from a build with
# -fsanitize=fuzzer-no-link *without* ASan preloaded (ASan's own weak coverage hooks shadow
# libFuzzer's). So each outcome (an error message with its numbers masked, how many keys or
# tensors were read, how far a load got) is also mapped to one of 1024 branches of an
# instrumented function: a new outcome is new coverage, and the input that reached it is kept.
_N_EDGES = 1024
_namespace: dict = {}
exec("def _edge(h):\n" + "".join(f"    {'if' if i == 0 else 'elif'} h == {i}: return\n"
                                  for i in range(_N_EDGES)), _namespace)
_edge = atheris.instrument_func(_namespace["_edge"])


def feedback(*outcome: object) -> None:
    """Mark an outcome (hashable parts; numbers in strings masked) as a coverage edge."""
    text = "|".join(re.sub(r"\d+", "#", str(part)) for part in outcome)
    _edge(zlib.crc32(text.encode("utf-8", "surrogateescape")) % _N_EDGES)
