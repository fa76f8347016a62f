#!/usr/bin/env python3
"""Does the llama.cpp built here reproduce tests/data/reference bit for bit?

The reference outputs were made by llama.cpp (build 0c1e570, llama-cpp-python 0.3.36, CPU,
2 threads, F16 KV, no flash attention, one batch per prompt). This runs the bench venv's
llama.cpp (same version; native AVX-512 flags without AMX, see llamacpp_venv.py) on the same
sequences the same way and reports, per model: teacher-forced top-1 agreement, how many
positions have all 64 reference logits bit-identical, the largest logit difference, and how
many greedy 48-token continuations are identical.

On the development VM all three models match exactly (every logit, 6/6 greedy): the
reference was computed with the kernel paths this build takes, which makes it an oracle that
localllm's numerics can be compared with op by op (docs/fidelity.md).

    PYTHONPATH=python python3 benchmarks/llamacpp_vs_reference.py [--reference DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from llamacpp_venv import DEFAULT_MODELS, ensure_venv


def worker(reference: Path, model: str, path: str) -> str:
    """Runs inside the bench venv: one model's report line."""
    import numpy as np
    from llama_cpp import Llama
    rows = [json.loads(line) for line in open(reference / "greedy.jsonl")]
    llm = Llama(path, n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=2, logits_all=True,
                verbose=False)
    ref = np.load(reference / f"logits_{model}.npz")
    agree = total = exact = greedy_same = n_prompts = 0
    max_diff = 0.0
    for r in (r for r in rows if r["model"] == model):
        name, n_prompts = r["prompt"]["name"], n_prompts + 1
        ids = r["prompt_ids"] + r["greedy_ids"][:-1]
        llm.reset()
        llm.eval(ids)
        top_ids, top_logits = ref[name + "__top_ids"].astype(np.int64), ref[name + "__top_logits"]
        logits = np.asarray(llm.scores[:len(top_ids)], np.float32)   # [positions, n_vocab]
        agree += int((logits.argmax(1) == top_ids[:, 0]).sum())
        total += len(top_ids)
        diff = np.abs(np.take_along_axis(logits, top_ids, 1) - top_logits)
        max_diff = max(max_diff, float(diff.max()))
        exact += int((diff == 0).all(1).sum())
        llm.reset()
        out: list[int] = []
        for tok in llm.generate(r["prompt_ids"], temp=0.0, top_k=1, repeat_penalty=1.0):
            out.append(tok)
            if len(out) >= len(r["greedy_ids"]) or tok == llm.token_eos():
                break
        greedy_same += int(out == r["greedy_ids"])
    return (f"{model}: top-1 {agree}/{total}; positions with all 64 logits bit-identical "
            f"{exact}/{total}; max |logit diff| {max_diff:.4g}; greedy identical {greedy_same}/{n_prompts}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "reference"))
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    reference = Path(args.reference).resolve()
    if args.worker:
        print(worker(reference, *args.worker))
        return 0
    from localllm import hub
    venv_py = str(ensure_venv())
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    for model in DEFAULT_MODELS:
        proc = subprocess.run([venv_py, __file__, "--reference", str(reference), "--worker", model,
                               str(hub.resolve_model(model))], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"llama.cpp worker failed on {model}:\n{proc.stderr[-3000:]}")
        print(proc.stdout.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
