#!/usr/bin/env python3
"""Makes test_quants.py's GGML_GOLDEN_SHA256 from llama.cpp's own reference quantizers.

It calls ggml's quantize_row_<type>_ref (for IQ4_NL / IQ4_XS: ggml_quantize_chunk with no
imatrix, what llama-quantize runs for them) on tests/golden_input.py's rows through ctypes, from
the libggml-base that llama-cpp-python 0.3.36 builds (the benchmarks' cache venv,
benchmarks/llamacpp_venv.py), and prints the first 32 hex digits of each output's sha256.

    PYTHONPATH=python python3 tests/data/golden_quants.py            # print the table
    PYTHONPATH=python python3 tests/data/golden_quants.py --check    # compare with test_quants.py
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
# ggml's type ids (ggml.h enum ggml_type) of the formats with a reference quantizer.
GGML_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9, "Q2_K": 10,
              "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15}
# Types llama-quantize writes through ggml_quantize_chunk rather than quantize_row_*_ref
# (for IQ4_NL the two differ: the _ref function runs a cruder scale search).
GGML_CHUNK_TYPES = {"IQ4_NL": 20, "IQ4_XS": 23}


def digests() -> dict[str, str]:
    """Runs inside the venv: {type name: digest} from libggml-base."""
    import numpy as np
    import llama_cpp
    sys.path.insert(0, str(TESTS))
    from golden_input import golden_input
    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    x = np.ascontiguousarray(golden_input(), np.float32)
    out = {}
    for name, type_id in GGML_TYPES.items():
        fn = getattr(lib, f"quantize_row_{name[0].lower()}{name[1:]}_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        y = np.zeros(lib.ggml_row_size(type_id, x.size), np.uint8)
        fn(x.ctypes.data, y.ctypes.data, x.size)
        out[name] = hashlib.sha256(y.tobytes()).hexdigest()[:32]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    for name, type_id in GGML_CHUNK_TYPES.items():
        y = np.zeros(lib.ggml_row_size(type_id, x.size), np.uint8)
        lib.ggml_quantize_chunk(type_id, x.ctypes.data, y.ctypes.data, 0, x.shape[0], x.shape[1], None)
        out[name] = hashlib.sha256(y.tobytes()).hexdigest()[:32]
    return out


def stored() -> dict[str, str]:
    text = (TESTS / "test_quants.py").read_text()
    return dict(re.findall(r'T\.(\w+): "([0-9a-f]{32})"', text))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with test_quants.py's table")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        for name, d in digests().items():
            print(name, d)
        return 0
    sys.path.insert(0, str(TESTS.parent / "benchmarks"))
    from llamacpp_venv import ensure_venv
    proc = subprocess.run([str(ensure_venv()), __file__, "--worker"], capture_output=True, text=True, check=True)
    fresh = dict(line.split() for line in proc.stdout.splitlines())
    for name, d in fresh.items():
        print(f"    T.{name}: \"{d}\",")
    if args.check:
        differ = [n for n, d in fresh.items() if stored().get(n) != d]
        print(f"{len(fresh) - len(differ)}/{len(fresh)} equal to test_quants.py" + (f"; differ: {differ}" if differ else ""))
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
