#!/usr/bin/env python3
"""Regenerates tests/data/reference from llama.cpp, and checks it against a fresh run.

llama.cpp is llama-cpp-python 0.3.36 built from source in the benchmarks' cache venv
(benchmarks/llamacpp_venv.py: native flags, the same release every benchmark compares with).
Each model runs in a worker inside that venv, with the settings the stored files were made with:
2 threads, F16 KV cache, flash attention off, a context of 1024 with batch 1024 (each prompt is one
batch, then one token at a time).

What is input and what is output:
- tokenize.jsonl: the rows' (model, text, add_special, parse_special) are the inputs; `ids` is
  llama.cpp's tokenization.
- greedy.jsonl: (model, prompt, rendered_prompt) are the inputs (chat prompts were rendered with
  the model's chat template beforehand; gemma3-270m has none and uses its documented turn format);
  `prompt_ids` is llama.cpp's tokenization of rendered_prompt with special tokens parsed,
  `greedy_ids` the up to 48 argmax tokens it generates (the end-of-generation token included when
  it comes first), `greedy_text` their text.
- logits_<model>.npz: teacher-forced logits over prompt_ids + greedy_ids[:-1] in one batch: the 64
  largest per position (ids, values), each row's log-sum-exp, and the whole row (float16) at the
  last prompt position.
- perplexity.json: llama-perplexity's run on corpus/gpl-3.txt through llama.cpp's C API with its
  defaults: tokenize the whole file, cut it into chunks of n_ctx tokens (the first token of a chunk
  replaced by BOS where the model adds BOS), n_batch 2048 / n_ubatch 512 (n_batch / n_ctx chunks
  share a batch as sequences), the sliding-window cache not kept full, the second half of each
  chunk scored; PPL = exp(mean NLL).
- llamacpp_bench.json is a speed record of one machine, not regenerated (see
  benchmarks/compare_llamacpp.py for speed in the same run).

    PYTHONPATH=python python3 tests/data/regenerate.py --out /tmp/ref     # write a fresh set
    PYTHONPATH=python python3 tests/data/regenerate.py --check            # compare with the stored set
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REFERENCE = HERE / "reference"
CORPUS = HERE / "corpus" / "gpl-3.txt"
N_CTX, N_GREEDY, TOP = 1024, 48, 64


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------- the worker (bench venv)

def open_llama(path: str, n_ctx: int, logits_all: bool):
    from llama_cpp import Llama
    return Llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2, logits_all=logits_all,
                 flash_attn=False, verbose=False)


def worker(model: str, path: str, out: Path, ppl_ctx: list[str]) -> None:
    import numpy as np
    llm = open_llama(path, N_CTX, logits_all=True)
    tok_rows = []
    for r in (r for r in read_jsonl(REFERENCE / "tokenize.jsonl") if r["model"] == model):
        ids = llm.tokenize(r["text"].encode("utf-8"), add_bos=r["add_special"], special=r["parse_special"])
        tok_rows.append({**r, "ids": list(ids)})
    greedy_rows, arrays = [], {}
    for r in (r for r in read_jsonl(REFERENCE / "greedy.jsonl") if r["model"] == model):
        prompt_ids = list(llm.tokenize(r["rendered_prompt"].encode("utf-8"), add_bos=True, special=True))
        if len(prompt_ids) > 1 and prompt_ids[0] == prompt_ids[1] == llm.token_bos():
            prompt_ids = prompt_ids[1:]      # the template already wrote BOS into the text
        llm.reset()
        greedy: list[int] = []
        for tok in llm.generate(prompt_ids, temp=0.0, top_k=1, repeat_penalty=1.0):
            greedy.append(tok)
            if len(greedy) >= N_GREEDY or is_end_of_generation(llm, tok):
                break
        text = llm.detokenize(greedy).decode("utf-8", errors="replace")
        greedy_rows.append({**r, "prompt_ids": prompt_ids, "greedy_ids": greedy, "greedy_text": text})
        llm.reset()
        ids = prompt_ids + greedy[:-1]
        llm.eval(ids)
        logits = np.asarray(llm.scores[:len(ids)], np.float32)           # [positions, n_vocab]
        order = np.argsort(-logits, axis=1, kind="stable")[:, :TOP]
        name = r["prompt"]["name"]
        arrays[f"{name}__top_ids"] = order.astype(np.int32)
        arrays[f"{name}__top_logits"] = np.take_along_axis(logits, order, 1)
        mx = logits.max(1, keepdims=True).astype(np.float64)
        arrays[f"{name}__logsumexp"] = (mx[:, 0] + np.log(np.exp(logits - mx).sum(1))).astype(np.float32)
        arrays[f"{name}__last_prompt_logits"] = logits[len(prompt_ids) - 1].astype(np.float16)
    np.savez_compressed(out / f"logits_{model}.npz", **arrays)
    ppl = []
    for spec in ppl_ctx:
        n_ctx, *rest = spec.split(":")
        ppl.append(perplexity(path, int(n_ctx), *rest[:2], *map(int, rest[2:])))
    (out / f"{model}.json").write_text(json.dumps({"tokenize": tok_rows, "greedy": greedy_rows, "ppl": ppl}))


def is_end_of_generation(llm, tok: int) -> bool:
    import llama_cpp
    return bool(llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), tok))


_QUIET_LOG = None


CACHE_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}     # ggml type ids of llama.cpp's --cache-type-k/-v


def perplexity(path: str, n_ctx: int, cache_k: str = "f16", cache_v: str = "f16", max_chunks: int = 0) -> dict:
    """llama-perplexity's run, through llama.cpp's C API: its defaults (n_batch 2048, n_ubatch
    512, so n_batch / n_ctx chunks share one batch as separate sequences; the sliding-window cache
    not kept full), BOS as each chunk's first token where the model adds BOS, the second half of
    each chunk scored. These settings reproduce its figures to the last digit. A quantized cache
    (cache_k / cache_v other than f16) runs as `llama-perplexity -ctk T -ctv T -fa on`: llama.cpp
    needs flash attention for a quantized V cache. max_chunks > 0: the first chunks only
    (llama-perplexity --chunks)."""
    import ctypes
    import numpy as np
    import llama_cpp as L
    global _QUIET_LOG
    L.llama_backend_init()
    if _QUIET_LOG is None:            # module-level: C keeps calling it after this function returns
        _QUIET_LOG = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(_QUIET_LOG, ctypes.c_void_p(0))
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab, add_bos, bos = L.llama_vocab_n_tokens(vocab), L.llama_vocab_get_add_bos(vocab), L.llama_vocab_bos(vocab)
    text = CORPUS.read_text(encoding="utf-8").encode("utf-8")
    buf = (L.llama_token * (len(text) + 16))()
    tokens = list(buf[:L.llama_tokenize(vocab, text, len(text), buf, len(buf), add_bos, False)])
    n_batch = 2048
    n_seq = max(1, n_batch // n_ctx)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx * n_seq, n_batch, 512, n_seq
    cp.n_threads = cp.n_threads_batch = 2
    cp.swa_full = False
    if (cache_k, cache_v) != ("f16", "f16"):
        cp.type_k, cp.type_v = CACHE_TYPES[cache_k], CACHE_TYPES[cache_v]
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(n_batch, 0, n_seq)
    n_chunks, first = len(tokens) // n_ctx, n_ctx // 2
    if max_chunks > 0:
        n_chunks = min(n_chunks, max_chunks)
    nll, count = 0.0, 0
    for c0 in range(0, n_chunks, n_seq):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        chunks = [tokens[c * n_ctx:(c + 1) * n_ctx] for c in range(c0, min(c0 + n_seq, n_chunks))]
        if add_bos:
            chunks = [[bos] + c[1:] for c in chunks]
        cells = [(t, p, s) for s, c in enumerate(chunks) for p, t in enumerate(c)]
        for b0 in range(0, len(cells), n_batch):
            part = cells[b0:b0 + n_batch]
            batch.n_tokens = len(part)
            for j, (t, p, s) in enumerate(part):
                batch.token[j], batch.pos[j], batch.n_seq_id[j] = t, p, 1
                batch.seq_id[j][0], batch.logits[j] = s, 1
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            for j, (_, p, s) in enumerate(part):
                if first <= p < n_ctx - 1:
                    row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, j), shape=(n_vocab,)).astype(np.float64)
                    mx = row.max()
                    nll += mx + math.log(np.exp(row - mx).sum()) - row[chunks[s][p + 1]]
                    count += 1
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    row = {"n_ctx": n_ctx, "chunks": n_chunks, "ppl": round(math.exp(nll / count), 4)}
    if (cache_k, cache_v) != ("f16", "f16"):
        row.update(cache_type_k=cache_k, cache_type_v=cache_v, flash_attn=True)
    if max_chunks > 0:
        row["max_chunks"] = max_chunks
    return row


# --------------------------------------------------------------------------- the driver (project python)

def ppl_key(r: dict) -> str:
    """A stored perplexity row's run: "n_ctx" or "n_ctx:cache_type_k:cache_type_v:max_chunks"."""
    if "cache_type_k" not in r and "max_chunks" not in r:
        return str(r["n_ctx"])
    return f"{r['n_ctx']}:{r.get('cache_type_k', 'f16')}:{r.get('cache_type_v', 'f16')}:{r.get('max_chunks', 0)}"


def ppl_contexts() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in json.loads((REFERENCE / "perplexity.json").read_text())["results"]:
        out.setdefault(r["model"], []).append(ppl_key(r))
    return out


def generate(out: Path) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from llamacpp_venv import DEFAULT_MODELS, LLAMA_CPP_PYTHON, ensure_venv
    from localllm import hub
    venv_py = str(ensure_venv())
    out.mkdir(parents=True, exist_ok=True)
    contexts = ppl_contexts()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    tok, greedy, ppl = [], [], []
    for model in DEFAULT_MODELS:
        print(f"{model}: running llama.cpp", file=sys.stderr, flush=True)
        subprocess.run([venv_py, __file__, "--worker", model, str(hub.resolve_model(model)), "--out", str(out),
                        "--ppl-ctx", *contexts.get(model, [])], check=True, env=env)
        part = json.loads((out / f"{model}.json").read_text())
        (out / f"{model}.json").unlink()
        tok += part["tokenize"]
        greedy += part["greedy"]
        ppl += [{"model": model, **p} for p in part["ppl"]]
    write_jsonl(out / "tokenize.jsonl", tok)
    write_jsonl(out / "greedy.jsonl", greedy)
    tool = (f"llama.cpp through {LLAMA_CPP_PYTHON} (tests/data/regenerate.py: llama-perplexity's method), "
            f"2 threads, -f corpus/gpl-3.txt")
    (out / "perplexity.json").write_text(json.dumps({"tool": tool, "results": ppl}, indent=2) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def same_array(key: str, old, new) -> bool:
    """Logits exactly; the log-sum-exp to 4e-6 (its summation order is the script's own); the
    top-64 ids up to the order of exactly tied logits."""
    import numpy as np
    if old.shape != new.shape:
        return False
    if key.endswith("__logsumexp"):
        return bool(np.allclose(old, new, rtol=0, atol=4e-6))
    if key.endswith("__top_ids"):
        return all(set(a) == set(b) for a, b in zip(old.tolist(), new.tolist()))
    return bool(np.array_equal(old, new))


def check(fresh: Path) -> int:
    """Differences between a fresh run and the stored set (0 when none)."""
    import numpy as np
    bad = 0
    for name, key in (("tokenize.jsonl", "ids"), ("greedy.jsonl", "greedy_ids")):
        old, new = read_jsonl(REFERENCE / name), read_jsonl(fresh / name)
        diff = sum(a[key] != b[key] for a, b in zip(old, new)) + abs(len(old) - len(new))
        print(f"{name}: {len(new)} rows, {diff} differ")
        bad += diff
    for f in sorted(REFERENCE.glob("logits_*.npz")):
        old, new = np.load(f), np.load(fresh / f.name)
        diff = sum(not same_array(k, old[k], new[k]) for k in old.files)
        print(f"{f.name}: {len(old.files)} arrays, {diff} differ")
        bad += diff
    old = {(r["model"], ppl_key(r)): r["ppl"] for r in json.loads((REFERENCE / "perplexity.json").read_text())["results"]}
    for r in json.loads((fresh / "perplexity.json").read_text())["results"]:
        stored = old[(r["model"], ppl_key(r))]
        rel = abs(r["ppl"] / stored - 1)
        print(f"perplexity {r['model']} {ppl_key(r)}: {r['ppl']} (stored {stored}, {rel:.2e} apart)")
        bad += rel > 1e-3
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="where to write the fresh set")
    ap.add_argument("--check", action="store_true", help="compare a fresh set with the stored one")
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--ppl-ctx", nargs="*", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker, args.out, args.ppl_ctx)
        return 0
    if args.out is None and not args.check:
        ap.error("give --out DIR (a fresh set) or --check")
    out = args.out or Path(os.environ.get("TMPDIR", "/tmp")) / "localllm-reference"
    if out.resolve() == REFERENCE.resolve():
        ap.error("write the fresh set elsewhere, then compare it (--check) before replacing the stored one")
    generate(out)
    return 1 if args.check and check(out) else 0


if __name__ == "__main__":
    sys.exit(main())
