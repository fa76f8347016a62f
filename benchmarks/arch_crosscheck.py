#!/usr/bin/env python3
"""Architectures and RoPE scalings held to llama.cpp itself, on checkpoints no one can download
here: small random-weight checkpoints built by transformers (tests/tiny_checkpoints.py: the
architectures without a scaling and each RoPE-scaling variant), each converted to F32 twice, by llama.cpp's own convert_hf_to_gguf.py (from the
llama-cpp-python source release the benchmarks build) and by `localllm convert`. Then:

* the two files: the same tensor names, shapes and types; the metadata keys that differ;
* logits on the same 192 tokens (3x past the checkpoints' original context) against
  transformers fp32, per position: localllm on llama.cpp's file and on its own, llama.cpp on
  both; and localllm against llama.cpp on the same file;
* greedy continuations (32 tokens after three 96-token prompts) of localllm and llama.cpp on
  localllm's file, token for token.

    python benchmarks/arch_crosscheck.py [--variants llama3 linear ...] [--json OUT]

Needs torch and transformers (the test extras), sentencepiece (llama.cpp's converter imports it)
and the bench venv (benchmarks/llamacpp_venv.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

import convert_common as common  # noqa: E402  (sets sys.path)
from llamacpp_venv import LLAMA_CPP_PYTHON  # noqa: E402
import machine  # noqa: E402

SRC_CACHE = Path.home() / ".cache" / "localllm" / "llamacpp-src"

_LLAMACPP_LOGITS = r"""
import json, sys, numpy as np
from llama_cpp import Llama
path, ids, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
llm = Llama(path, n_ctx=len(ids) + 8, n_batch=len(ids) + 8, n_ubatch=len(ids) + 8, n_threads=2,
            logits_all=True, flash_attn=False, verbose=False)
llm.eval(ids)
np.save(out, np.asarray(llm.scores[:len(ids)], np.float32))
"""


_LLAMACPP_GREEDY = r"""
import json, sys
from llama_cpp import Llama
path, prompts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
llm = Llama(path, n_ctx=max(len(p) for p in prompts) + n + 8, n_threads=2, flash_attn=False, verbose=False)
outs = []
for ids in prompts:
    llm.reset()
    out = []
    for tok in llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0):
        out.append(int(tok))
        if len(out) >= n:
            break
    outs.append(out)
print(json.dumps(outs))
"""
GREEDY_PROMPTS, GREEDY_TOKENS = 3, 32


def llamacpp_greedy(path: Path, prompts: list[list[int]], n: int) -> list[list[int]]:
    proc = subprocess.run([str(common.llamacpp_python()), "-c", _LLAMACPP_GREEDY, str(path), json.dumps(prompts),
                           str(n)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp failed on {path.name}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def greedy_match(ours: Path, path_for_llamacpp: Path) -> dict:
    """Greedy continuations (32 tokens after 96-token random prompts, i.e. past the scaled
    checkpoints' original context) of localllm on its file and llama.cpp on the given file."""
    from localllm import LLM
    rng = np.random.default_rng(3)
    prompts = [[int(i) for i in rng.integers(100, 40000, 96)] for _ in range(GREEDY_PROMPTS)]
    llm = LLM(str(ours), n_ctx=96 + GREEDY_TOKENS + 8, seed=0)
    mine = [llm.generate(p, max_tokens=GREEDY_TOKENS, temperature=0.0, ignore_eos=True).token_ids
            for p in prompts]
    theirs = llamacpp_greedy(path_for_llamacpp, prompts, GREEDY_TOKENS)
    return {"identical": sum(a == b[:len(a)] and len(a) == len(b) for a, b in zip(mine, theirs)),
            "of": len(prompts),
            "first_divergence": [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
                                 for a, b in zip(mine, theirs)]}


def llamacpp_source() -> Path:
    """vendor/llama.cpp of the llama-cpp-python release the benchmarks build (sdist, cached)."""
    version = LLAMA_CPP_PYTHON.split("==")[1]
    root = SRC_CACHE / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (root / "convert_hf_to_gguf.py").is_file():
        return root
    SRC_CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    LLAMA_CPP_PYTHON, "-d", str(SRC_CACHE)], check=True)
    with tarfile.open(SRC_CACHE / f"llama_cpp_python-{version}.tar.gz") as tar:
        tar.extractall(SRC_CACHE, filter="data")
    return root


def llamacpp_convert(src: Path, out: Path) -> None:
    root = llamacpp_source()
    env = dict(os.environ, PYTHONPATH=str(root / "gguf-py"), NO_LOCAL_GGUF="")
    proc = subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(src), "--outtype", "f32",
                           "--outfile", str(out)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed:\n{proc.stderr[-3000:]}")


def llamacpp_logits(path: Path, ids: list[int], tmp: Path) -> np.ndarray:
    out = tmp / "llamacpp_logits.npy"
    proc = subprocess.run([str(common.llamacpp_python()), "-c", _LLAMACPP_LOGITS, str(path), json.dumps(ids),
                           str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp failed on {path.name}:\n{proc.stderr[-3000:]}")
    return np.load(out)


def file_facts(path: Path) -> tuple[dict, dict]:
    import gguf
    r = gguf.GGUFReader(str(path))
    tensors = {t.name: (tuple(int(x) for x in t.shape), t.tensor_type.name) for t in r.tensors}
    keys = {f.name: f.contents() for f in r.fields.values()
            if not f.name.startswith(("GGUF.", "general.", "tokenizer."))}
    return tensors, keys


def compare_files(ours: Path, theirs: Path) -> dict:
    (t_ours, k_ours), (t_ref, k_ref) = file_facts(ours), file_facts(theirs)
    return {"tensors_only_ours": sorted(set(t_ours) - set(t_ref)),
            "tensors_only_llamacpp": sorted(set(t_ref) - set(t_ours)),
            "tensors_differing": sorted(n for n in set(t_ours) & set(t_ref) if t_ours[n] != t_ref[n]),
            "keys_only_ours": sorted(set(k_ours) - set(k_ref)),
            "keys_only_llamacpp": sorted(set(k_ref) - set(k_ours)),
            "keys_differing": {k: [k_ours[k], k_ref[k]] for k in sorted(set(k_ours) & set(k_ref))
                               if k_ours[k] != k_ref[k]}}


def max_row_err(x: np.ndarray, ref: np.ndarray) -> float:
    return float((np.linalg.norm(x - ref, axis=-1) / np.linalg.norm(ref, axis=-1)).max())


def checks() -> dict[str, tuple[str, dict | None]]:
    import tiny_checkpoints as tc
    return {"llama": ("llama", None), "qwen3": ("qwen3", None), "qwen3moe": ("qwen3moe", None), "phi3": ("phi3", None),
            "gemma2": ("gemma2", None),
            **tc.VARIANTS}


def check_variant(name: str, tmp: Path) -> dict:
    import tiny_checkpoints as trs
    from localllm import LLM
    from localllm_convert import convert
    family, rope = checks()[name]
    # The directory names general.name; llama.cpp's vocabulary loader treats a model whose name
    # says phi3 as Phi-3's own (it needs Phi-3's <unk>, <s>, </s> and <|endoftext|>, which the
    # borrowed SmolLM2 tokenizer lacks), so the Phi-3 checkpoints get a neutral name.
    src = trs.build(family, rope, tmp / name.replace("phi3", "p3"))
    ours, theirs = tmp / f"{name}-localllm.gguf", tmp / f"{name}-llamacpp.gguf"
    convert(src, ours, type="f32", progress=False)
    ids = [int(i) for i in np.random.default_rng(1).integers(100, 40000, trs.N_TOKENS)]
    ref = trs.hf_logits(src, ids)
    logits = {"localllm on its file": LLM(str(ours), n_ctx=len(ids) + 1, seed=0).logits(ids)}
    result = {"variant": name}
    try:
        logits["llama.cpp on localllm's file"] = llamacpp_logits(ours, ids, tmp)
    except RuntimeError as e:     # e.g. llama.cpp's phi3 vocabulary wants Phi-3's own special tokens
        result["llamacpp_load_failed"] = [l for l in str(e).splitlines() if l.strip()][-1]
    try:          # llama.cpp's converter wants what real checkpoints ship (e.g. Phi-3's tokenizer.model)
        llamacpp_convert(src, theirs)
    except RuntimeError as e:
        result["llamacpp_convert_failed"] = str(e).strip().splitlines()[-1]
    else:
        result["files"] = compare_files(ours, theirs)
        logits["localllm on llama.cpp's file"] = LLM(str(theirs), n_ctx=len(ids) + 1, seed=0).logits(ids)
        logits["llama.cpp on its file"] = llamacpp_logits(theirs, ids, tmp)
    result["max_rel_err_vs_transformers"] = {k: max_row_err(v, ref) for k, v in logits.items()}
    result["top1_vs_transformers"] = {k: float((v.argmax(-1) == ref.argmax(-1)).mean()) for k, v in logits.items()}
    if "llama.cpp on localllm's file" in logits:
        result["greedy_localllm_vs_llamacpp_on_localllms_file"] = greedy_match(ours, ours)
        result["localllm_vs_llamacpp_on_localllms_file"] = max_row_err(logits["localllm on its file"],
                                                                       logits["llama.cpp on localllm's file"])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(checks()))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--append", action="store_true", help="add to the results already in --json")
    args = ap.parse_args()
    m = machine.describe(2, str(common.llamacpp_python()))
    print(machine.line(m))
    results = []
    if args.append and args.json and args.json.exists():
        results = [r for r in json.loads(args.json.read_text())["results"] if r["variant"] not in args.variants]
    with tempfile.TemporaryDirectory() as d:
        for name in args.variants:
            r = check_variant(name, Path(d))
            results.append(r)
            print(json.dumps(r, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps({"machine": m, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
