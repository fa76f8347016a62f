#!/usr/bin/env python3
"""Speculative decoding: decode speed with and without it, on two kinds of real prompts, next to
llama.cpp's own speculative decoding on the same files in the same run.

    PYTHONPATH=python:convert python3 benchmarks/speculative.py [--max-tokens 128] [--only ngram draft]

Workloads (greedy, chat template, the same token ids for both engines):
- code editing: "rename X to Y in this file and print it whole", with a real source file of
  this repository in the prompt (n-gram lookup's home ground), on Qwen2.5-Coder-0.5B;
- open generation: explanations and stories with nothing to copy from the prompt.

Configurations:
- n-gram lookup on Qwen2.5-Coder Q4_K_M (localllm `--spec ngram`; llama.cpp: llama-cpp-python's
  `LlamaPromptLookupDecoding`, llama.cpp's prompt-lookup decoding, same n-gram and draft sizes);
- a draft model with the target's vocabulary: the Qwen2.5-Coder Q4_K_M file drafts for a
  higher-precision target made from it (dequantized to F16, and to Q8_0, by this project's
  converter into ~/.cache/localllm/derived), and the same for Gemma3-270M (localllm `-md`;
  llama.cpp: `llama-server --model-draft` when benchmarks/llamaserver_build.py has built it).

Figures: generated tokens / seconds from the first generated token to the last (prefill
excluded), acceptance rate (accepted / drafted) and mean accepted length (drafted tokens
accepted per verification). Each configuration runs plain and speculative in the same process;
greedy outputs are checked equal.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

CODE_FILES = [("python/localllm/engine/kv_blocks.py", 2600, "BlockTable", "KVTable"),
              ("python/localllm/sampling.py", 2600, "StopMatcher", "StopStrings")]
OPEN_PROMPTS = ["Explain how a CPU cache works, and why it matters for performance.",
                "Write a short story about a lighthouse keeper who finds a message in a bottle."]


def prompts(tokenizer, arch: str) -> dict[str, list[list[int]]]:
    def chat(text: str) -> list[int]:
        return tokenizer.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", parse_special=True)

    def gemma(text: str) -> list[int]:
        return tokenizer.encode(f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n",
                                parse_special=True)
    wrap = gemma if arch.startswith("gemma") else chat
    code = []
    for path, n_chars, old, new in CODE_FILES:
        text = (REPO / path).read_text()[:n_chars]
        code.append(wrap(f"In this Python code, rename `{old}` to `{new}` and print the whole file, "
                         f"changed, in one code block:\n```python\n{text}\n```"))
    return {"code": code, "open": [wrap(p) for p in OPEN_PROMPTS]}


def run_localllm(target: Path, spec: dict, workloads: list[str], max_tokens: int, threads: int) -> dict:
    from localllm import LLM
    out = {}
    plain = LLM(str(target), n_ctx=4096, n_threads=threads)
    fast = LLM(str(target), n_ctx=4096, n_threads=threads, **spec)
    sets = prompts(plain.tokenizer, plain.gguf.metadata["general.architecture"])
    for w in workloads:
        rows = []
        for ids in sets[w]:
            row = {}
            for name, llm in (("plain", plain), ("spec", fast)):
                stats0 = (llm.engine.stats.spec_verifications, llm.engine.stats.spec_drafted,
                          llm.engine.stats.spec_accepted)
                r = llm.generate(ids, temperature=0.0, max_tokens=max_tokens)
                s = llm.engine.stats
                ver, dr, acc = (s.spec_verifications - stats0[0], s.spec_drafted - stats0[1],
                                s.spec_accepted - stats0[2])
                row[name] = {"tokens": len(r.token_ids), "tps": r.timings.generation_tps, "ids": r.token_ids,
                             "drafted": dr, "accepted": acc, "verifications": ver}
            row["identical"] = row["plain"].pop("ids") == row["spec"].pop("ids")
            rows.append(row)
        out[w] = summarize(rows)
    return out


def summarize(rows: list[dict]) -> dict:
    def total(name, key):
        return sum(r[name][key] for r in rows)
    plain_s = sum(r["plain"]["tokens"] / r["plain"]["tps"] for r in rows if r["plain"]["tps"])
    spec_s = sum(r["spec"]["tokens"] / r["spec"]["tps"] for r in rows if r["spec"]["tps"])
    plain_tps, spec_tps = total("plain", "tokens") / plain_s, total("spec", "tokens") / spec_s
    drafted, accepted, ver = total("spec", "drafted"), total("spec", "accepted"), total("spec", "verifications")
    return {"plain_tps": round(plain_tps, 2), "spec_tps": round(spec_tps, 2), "speedup": round(spec_tps / plain_tps, 2),
            "acceptance": round(accepted / drafted, 3) if drafted else 0.0,
            "mean_accepted": round(accepted / ver, 2) if ver else 0.0,
            "identical": all(r["identical"] for r in rows), "rows": rows}


# ---- llama.cpp ----
LOOKUP_WORKER = r"""
import json, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
a = json.loads(sys.argv[1])
res = {}
for mode in ("plain", "spec"):
    draft = LlamaPromptLookupDecoding(max_ngram_size=a["ngram_max"], num_pred_tokens=a["draft_max"]) if mode == "spec" else None
    # logits_all with a draft: llama-cpp-python forces it on in the context but sizes its score
    # buffer from the argument (n_batch rows), so a prompt past 512 tokens overflows it
    llm = Llama(a["model"], n_ctx=4096, n_threads=a["threads"], n_threads_batch=a["threads"], draft_model=draft,
                logits_all=draft is not None, verbose=False)
    out = {}
    for w, sets in a["prompts"].items():
        n_tok, secs = 0, 0.0
        for ids in sets:
            llm.reset()
            first = last = None
            n = 0
            for _ in llm.create_completion(ids, max_tokens=a["max_tokens"], temperature=0.0, top_k=1, stream=True):
                last = time.perf_counter()
                first = first or last
                n += 1
            n_tok += n - 1
            secs += last - first
        out[w] = n_tok / secs
    res[mode] = out
print(json.dumps(res))
"""


def run_llamacpp_lookup(target: Path, sets: dict, args) -> dict:
    from llamacpp_venv import VENV
    py = VENV / "bin" / "python"
    if subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True).returncode != 0:
        return {"skipped": f"llama-cpp-python not installed in {VENV} (benchmarks/llamacpp_venv.py)"}
    payload = json.dumps({"model": str(target), "threads": args.threads, "max_tokens": args.max_tokens,
                          "draft_max": args.draft_max, "ngram_max": 4, "prompts": sets})
    proc = subprocess.run([str(py), "-c", LOOKUP_WORKER, payload], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"skipped": f"worker failed: {proc.stderr[-500:]}"}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {w: {"plain_tps": round(res["plain"][w], 2), "spec_tps": round(res["spec"][w], 2),
                "speedup": round(res["spec"][w] / res["plain"][w], 2)} for w in sets}


def run_llama_server_draft(target: Path, draft: Path, sets: dict, args) -> dict:
    import httpx
    from llamaserver_build import BINARY
    if not BINARY.exists():
        return {"skipped": f"{BINARY} not built (benchmarks/llamaserver_build.py)"}
    from serve_compare import _free_port, _wait_healthy
    out = {}
    for mode in ("plain", "spec"):
        port = _free_port()
        cmd = [str(BINARY), "-m", str(target), "--port", str(port), "-c", "4096", "-t", str(args.threads),
               "-tb", str(args.threads), "-np", "1"]
        if mode == "spec":
            # (this llama.cpp release names them --spec-*: --draft-max and -cd were removed)
            cmd += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.draft_max),
                    "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.75"]
        with open(f"/tmp/spec_bench_llama_server_{mode}.log", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                _wait_healthy(f"http://127.0.0.1:{port}", proc)
                for w, prompts_ in sets.items():
                    n_tok, secs, drafted, accepted = 0, 0.0, 0, 0
                    for ids in prompts_:
                        r = httpx.post(f"http://127.0.0.1:{port}/completion", timeout=3600,
                                       json={"prompt": ids, "n_predict": args.max_tokens, "temperature": 0,
                                             "top_k": 1, "cache_prompt": False}).json()
                        t = r["timings"]
                        n_tok += t["predicted_n"]
                        secs += t["predicted_ms"] / 1000
                        drafted += t.get("draft_n", 0)
                        accepted += t.get("draft_n_accepted", 0)
                    out.setdefault(w, {})[f"{mode}_tps"] = round(n_tok / secs, 2)
                    if mode == "spec":
                        out[w]["acceptance"] = round(accepted / drafted, 3) if drafted else None
            finally:
                proc.terminate()
                proc.wait()
    for w in out:
        out[w]["speedup"] = round(out[w]["spec_tps"] / out[w]["plain_tps"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--only", nargs="+", default=["ngram", "draft"], choices=["ngram", "draft"])
    ap.add_argument("--pairs", nargs="+", default=["qwen-f16", "qwen-q8_0", "gemma-f16", "gemma-q8_0"])
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--json", default="speculative.json")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from derived_models import derived_model
    from conftest import model_file
    from localllm import SpecConfig, Tokenizer
    from localllm.gguf import GGUFFile
    from machine import describe
    report = {"machine": describe(args.threads), "max_tokens": args.max_tokens, "runs": []}
    qwen = model_file("qwen2.5-coder-0.5b-q4_k_m")
    if "ngram" in args.only:
        meta = GGUFFile(str(qwen)).metadata
        sets = prompts(Tokenizer.from_gguf_metadata(meta), meta["general.architecture"])
        spec = {"speculative": SpecConfig(mode="ngram", draft_max=args.draft_max)}
        run = {"config": "ngram", "target": qwen.name,
               "localllm": run_localllm(qwen, spec, ["code", "open"], args.max_tokens, args.threads)}
        if not args.no_llamacpp:
            run["llama.cpp"] = run_llamacpp_lookup(qwen, sets, args)
        report["runs"].append(run)
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))      # kept as it goes
        print(json.dumps(run, default=str), flush=True)
    if "draft" in args.only:
        for pair in args.pairs:
            key = {"qwen": "qwen2.5-coder-0.5b-q4_k_m", "gemma": "gemma3-270m-q4_k_m"}[pair.split("-")[0]]
            draft = model_file(key)
            target = derived_model(key, pair.split("-")[1])
            workloads = ["code", "open"] if pair.startswith("qwen") else ["open"]
            spec = {"speculative": SpecConfig(mode="draft", draft_model=str(draft), draft_max=args.draft_max)}
            t0 = time.perf_counter()
            run = {"config": f"draft {draft.name} -> {target.name}",
                   "localllm": run_localllm(target, spec, workloads, args.max_tokens, args.threads)}
            if not args.no_llamacpp:
                meta = GGUFFile(str(draft)).metadata
                sets = {w: v for w, v in prompts(Tokenizer.from_gguf_metadata(meta), meta["general.architecture"]).items()
                        if w in workloads}
                run["llama.cpp"] = run_llama_server_draft(target, draft, sets, args)
            run["seconds"] = round(time.perf_counter() - t0, 1)
            report["runs"].append(run)
            Path(args.json).write_text(json.dumps(report, indent=1, default=str))
            print(json.dumps(run, default=str), flush=True)
    Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    print_table(report)


def print_table(report: dict) -> None:
    print("\n| config | workload | plain t/s | spec t/s | speed-up | acceptance | mean accepted | identical "
          "| llama.cpp plain / spec t/s | llama.cpp speed-up |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for run in report["runs"]:
        lc = run.get("llama.cpp", {})
        for w, r in run["localllm"].items():
            l = lc.get(w, {})
            lcs = f"{l['plain_tps']} / {l['spec_tps']}" if "plain_tps" in l else lc.get("skipped", "not run")[:40]
            print(f"| {run['config']} | {w} | {r['plain_tps']} | {r['spec_tps']} | {r['speedup']}x | "
                  f"{r['acceptance']} | {r['mean_accepted']} | {r['identical']} | {lcs} | "
                  f"{str(l.get('speedup', '-')) + 'x' if 'speedup' in l else '-'} |")


if __name__ == "__main__":
    main()
