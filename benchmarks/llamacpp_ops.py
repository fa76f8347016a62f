#!/usr/bin/env python3
"""Op-by-op comparison with llama.cpp: every matmul of a forward, fed llama.cpp's own input.

llama.cpp (the bench venv's, which reproduces tests/data/reference bit for bit, see
llamacpp_vs_reference.py) runs one sequence with an eval callback that copies out every F32
tensor of its graph; then each MUL_MAT node whose weight is a GGUF matrix is recomputed by
localllm's llama.cpp-order kernel (_harness.matmul_llamacpp) from llama.cpp's input to that node,
and the outputs are compared bit for bit. Both the prompt batch and a one-token decode step are
checked, since llama.cpp picks different kernels for them. Prints, per model and weight type,
how many matmuls and elements differ. This is how the llama.cpp numerics were pinned down
(docs/fidelity.md); run it after touching a ggml_order kernel.

    PYTHONPATH=python python3 benchmarks/llamacpp_ops.py [-m MODEL ...] [--tokens N]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from llamacpp_venv import DEFAULT_MODELS, ensure_venv


def capture(model_path: str, ids: list[int], out: str, decode: bool) -> None:
    """Runs inside the bench venv: evaluates ids (as one batch, or the last one alone after the
    others with `decode`) and saves every F32 tensor of that evaluation to out (.npz + .json)."""
    import llama_cpp
    import numpy as np
    from llama_cpp import Llama

    class Tensor(ctypes.Structure):   # struct ggml_tensor (ggml.h), read only
        _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                    ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                    ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                    ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                    ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]
    store, meta, active = {}, {}, [False]

    def on_tensor(ptr, ask, _):
        t = Tensor.from_address(ptr)
        if ask or not active[0] or t.type != 0:          # F32 results only
            return True
        ne, nb = list(t.ne), list(t.nb)
        span = sum((ne[k] - 1) * nb[k] for k in range(4)) + 4
        raw = np.frombuffer((ctypes.c_char * span).from_address(t.data), np.uint8).copy()
        arr = np.lib.stride_tricks.as_strided(raw.view(np.float32), shape=ne[::-1], strides=nb[::-1])
        key, i = t.name.decode(), 0
        while key in store:
            i += 1
            key = f"{t.name.decode()}#{i}"
        store[key] = np.ascontiguousarray(arr)
        meta[key] = {"op": t.op, "src": [Tensor.from_address(s).name.decode() for s in t.src if s]}
        return True

    callback = llama_cpp.ggml_backend_sched_eval_callback(on_tensor)
    llm = Llama(model_path, n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=2, verbose=False)
    params = llm.context_params                      # the defaults the reference was made with
    params.cb_eval, params.cb_eval_user_data = callback, None
    ctx = llama_cpp.llama_init_from_model(llm.model, params)

    def run(tokens, pos0):
        batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        batch.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, pos0 + i, 1, 1
            batch.seq_id[i][0] = 0
        assert llama_cpp.llama_decode(ctx, batch) == 0
        llama_cpp.llama_batch_free(batch)

    if decode:
        run(ids[:-1], 0)
    active[0] = True
    run(ids[-1:] if decode else ids, len(ids) - 1 if decode else 0)
    np.savez(out, **store)
    Path(out + ".json").write_text(json.dumps(meta))


def compare(model_path: str, npz: str) -> dict:
    """Per weight type: [matmuls, matmuls with any difference, elements differing, elements]."""
    import numpy as np

    from localllm import _harness
    from localllm.gguf import GGUFFile
    f = GGUFFile(model_path)
    weights = {t.name: t for t in f.tensors}
    data = np.load(npz)
    meta = json.loads(Path(npz + ".json").read_text())
    stats: dict = defaultdict(lambda: [0, 0, 0, 0])
    for name, m in meta.items():
        w = weights.get(m["src"][0]) if m["op"] == 29 and m["src"] else None   # GGML_OP_MUL_MAT
        if w is None or len(w.shape) != 2:
            continue
        K, N = int(w.shape[0]), int(w.shape[1])
        s = stats[w.type_name]
        s[0] += 1
        try:
            x = data[m["src"][1]].reshape(-1, K)
            y = _harness.matmul_llamacpp(np.asarray(f.tensor_data(w.name)).reshape(N, -1), w.type, N, K, x)
        except ValueError:                            # no llama.cpp-order kernel for this type
            s[1] += 1
            continue
        diff = int((y.view(np.uint32) != data[name].reshape(y.shape).view(np.uint32)).sum())
        s[1] += diff > 0
        s[2] += diff
        s[3] += y.size
    return dict(stats)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", default=None)
    ap.add_argument("--tokens", type=int, default=0, help="use the first N ids of the 'france' sequence")
    ap.add_argument("--reference", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "reference"))
    ap.add_argument("--capture", nargs=4, metavar=("PATH", "IDS", "OUT", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.capture:
        path, ids, out, mode = args.capture
        capture(path, json.loads(Path(ids).read_text()), out, mode == "decode")
        return 0
    from localllm import hub
    venv_py = str(ensure_venv())
    rows = [json.loads(line) for line in open(Path(args.reference) / "greedy.jsonl")]
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.model or DEFAULT_MODELS:
            path = str(hub.resolve_model(model))
            row = next(r for r in rows if r["model"] == model and r["prompt"]["name"] == "france")
            ids = row["prompt_ids"] + row["greedy_ids"][:-1]
            ids = ids[:args.tokens] if args.tokens else ids
            Path(tmp, "ids.json").write_text(json.dumps(ids))
            for mode in ("prompt", "decode"):
                out = str(Path(tmp, f"{mode}.npz"))
                subprocess.run([venv_py, __file__, "--capture", path, str(Path(tmp, "ids.json")), out, mode],
                               check=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
                for wtype, (n, bad, diff, total) in sorted(compare(path, out).items()):
                    print(f"{model} {mode} ({len(ids) if mode == 'prompt' else 1} rows) {wtype}: "
                          f"{n - bad}/{n} matmuls bit-identical, {diff}/{total} elements differ", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
