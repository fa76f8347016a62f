#!/usr/bin/env python3
"""`localllm quantize --imatrix` against llama.cpp's own quantizer: llama_model_quantize (what
llama-quantize runs) called from the llama.cpp build's libllama.so (llamaserver_build.py) with the
same imatrix, the importances computed as llama-quantize computes them (sum / count). Prints, per
preset, how many tensors differ in type or bytes (docs/quantization.md's table).

    python benchmarks/quantize_imatrix_vs_llamacpp.py F32.gguf IMATRIX.gguf [presets...]
"""
from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from llamacpp_source import ROOT

# llama.cpp's LLAMA_FTYPE ids of the presets compared.
FTYPES = {"q2_k": 10, "q3_k_s": 11, "q3_k_m": 12, "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_m": 17,
          "q6_k": 18, "iq4_nl": 25, "iq4_xs": 30, "q2_k_s": 21, "q4_0": 2, "q5_0": 8}


class ImatrixData(ctypes.Structure):          # llama.h llama_model_imatrix_data
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class QuantizeParams(ctypes.Structure):        # llama.h llama_model_quantize_params (this llama.cpp)
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p), ("max_buf_size", ctypes.c_size_t)]


def llama_quantize(lib, src: Path, dst: Path, ftype: int, im) -> None:
    names = sorted(im.sums)
    weights = [np.ascontiguousarray(im.importance(n).reshape(-1), dtype=np.float32) for n in names]
    encoded = [n.encode() for n in names]
    table = (ImatrixData * (len(names) + 1))()
    for i, (n, w) in enumerate(zip(encoded, weights)):
        table[i].name, table[i].data, table[i].size = n, w.ctypes.data, w.size
    params = lib.llama_model_quantize_default_params()
    params.ftype, params.nthread = ftype, 2
    params.imatrix = ctypes.cast(table, ctypes.c_void_p).value
    if lib.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize failed for ftype {ftype}")


def differences(a_path: Path, b_path: Path) -> tuple[int, int]:
    """(tensors compared, tensors whose type or bytes differ)."""
    from localllm.gguf import GGUFFile
    a, b = GGUFFile(str(a_path)), GGUFFile(str(b_path))
    bad = 0
    for t in a.tensors:
        u = b.tensor(t.name)
        same = u.type_name == t.type_name and np.array_equal(np.asarray(a.tensor_data(t.name)).view(np.uint8),
                                                             np.asarray(b.tensor_data(t.name)).view(np.uint8))
        bad += not same
    return len(a.tensors), bad


def main() -> None:
    from localllm.imatrix import load_imatrix
    src, im_path = Path(sys.argv[1]), Path(sys.argv[2])
    presets = sys.argv[3:] or ["q2_k", "q3_k_s", "q4_k_m", "q5_k_m", "q6_k", "iq4_nl", "iq4_xs"]
    lib = ctypes.CDLL(str(ROOT / "build" / "bin" / "libllama.so"))
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_backend_init()
    im = load_imatrix(im_path)
    work = Path(tempfile.mkdtemp(prefix="quantize-imatrix-"))
    print("| preset | tensors | differing (type or bytes) |\n|---|---|---|")
    for preset in presets:
        ref, ours = work / f"ref-{preset}.gguf", work / f"ours-{preset}.gguf"
        llama_quantize(lib, src, ref, FTYPES[preset], im)
        subprocess.run([sys.executable, "-m", "localllm_cli", "quantize", str(src), str(ours), preset,
                        "--imatrix", str(im_path), "-q"], check=True, capture_output=True)
        n, bad = differences(ref, ours)
        print(f"| {preset} | {n} | {bad} |", flush=True)
        ref.unlink()
        ours.unlink()


if __name__ == "__main__":
    main()
