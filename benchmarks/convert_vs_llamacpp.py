#!/usr/bin/env python3
"""Our quantization vs llama.cpp's on the same F16 GGUF: per-tensor types, bytes and RMSE.

For each model: convert the checkpoint to F16 with localllm, then quantize that F16 file with
llama.cpp (llama-cpp-python's llama_model_quantize, no imatrix) and with `localllm quantize`,
and compare every tensor: the type (llama.cpp's mixture rules), whether the bytes are identical,
and the RMSE of the dequantized tensor against the F16 values (ours must be no worse than
llama.cpp's by more than 1%). Also checks that the one-pass HF -> preset conversion chooses the
same types.

    python benchmarks/convert_vs_llamacpp.py [--models smollm2 qwen2 gemma3] [--types q4_k_m ...]
        [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

import convert_common as common  # noqa: E402  (sets sys.path)
from localllm import quants  # noqa: E402
from localllm.gguf import GGUFFile  # noqa: E402
from localllm_convert import convert, quantize_gguf  # noqa: E402


def _values(f: GGUFFile, t) -> np.ndarray:
    shape = tuple(reversed(t.shape))
    return quants.dequantize(np.ascontiguousarray(f.tensor_data(t.name)), t.type, shape) \
        .astype(np.float64)


def compare(f16: Path, ours: Path, ref: Path, direct: Path) -> dict:
    a, b, src, d = GGUFFile(str(ours)), GGUFFile(str(ref)), GGUFFile(str(f16)), GGUFFile(str(direct))
    ref_types = {t.name: t.type_name for t in b.tensors}
    direct_types = {t.name: t.type_name for t in d.tensors}
    rows, worst = [], 0.0
    for t in a.tensors:
        rt = b.tensor(t.name)
        same_type = t.type_name == rt.type_name
        same_bytes = same_type and np.array_equal(
            np.asarray(a.tensor_data(t.name)).view(np.uint8), np.asarray(b.tensor_data(t.name)).view(np.uint8))
        x = _values(src, src.tensor(t.name))
        rmse_ours = float(np.sqrt(np.mean((_values(a, t) - x) ** 2)))
        rmse_ref = float(np.sqrt(np.mean((_values(b, rt) - x) ** 2)))
        ratio = rmse_ours / rmse_ref if rmse_ref > 0 else (1.0 if rmse_ours == 0 else float("inf"))
        worst = max(worst, ratio)
        rows.append({"name": t.name, "ours": t.type_name, "llama.cpp": rt.type_name,
                     "direct": direct_types[t.name], "same_bytes": bool(same_bytes),
                     "rmse_ours": rmse_ours, "rmse_llamacpp": rmse_ref})
    return {"n_tensors": len(rows),
            "type_mismatches": sum(r["ours"] != r["llama.cpp"] for r in rows),
            "direct_type_mismatches": sum(r["direct"] != ref_types[r["name"]] for r in rows),
            "byte_identical": sum(r["same_bytes"] for r in rows),
            "worst_rmse_ratio": worst, "tensors": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2", "qwen2", "gemma3"])
    ap.add_argument("--types", nargs="+", default=["q4_k_m", "q4_k_s", "q5_k_m", "q6_k", "q8_0", "q4_0"])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="write all results (per tensor) here")
    args = ap.parse_args()
    results, ok = {}, True
    with tempfile.TemporaryDirectory(prefix="convert-vs-llamacpp-") as tmp:
        tmp = Path(tmp)
        for model in args.models:
            ckpt = common.checkpoint(model)
            f16 = tmp / f"{model}-f16.gguf"
            convert(ckpt, f16, type="f16", threads=args.threads, progress=False)
            for preset in args.types:
                ours, ref, direct = (tmp / f"{model}-{preset}-{k}.gguf" for k in ("ours", "lcpp", "direct"))
                quantize_gguf(f16, ours, preset, threads=args.threads, progress=False)
                common.llamacpp_quantize(f16, ref, preset, args.threads)
                convert(ckpt, direct, type=preset, threads=args.threads, progress=False)
                r = compare(f16, ours, ref, direct)
                results[f"{model}/{preset}"] = r
                good = r["type_mismatches"] == 0 and r["direct_type_mismatches"] == 0 \
                    and r["worst_rmse_ratio"] <= 1.01
                ok &= good
                print(f"{model:8} {preset:7} tensors {r['n_tensors']:4}  type mismatches "
                      f"{r['type_mismatches']} (direct {r['direct_type_mismatches']})  "
                      f"byte-identical {r['byte_identical']:4}  worst RMSE ours/llama.cpp "
                      f"{r['worst_rmse_ratio']:.4f}  {'OK' if good else 'FAIL'}", flush=True)
                for p in (ours, ref, direct):
                    p.unlink()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
