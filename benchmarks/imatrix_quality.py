#!/usr/bin/env python3
"""What an imatrix buys, and whether our forward scores it as llama.cpp does: perplexity of the
three cached models quantized to Q2_K, Q3_K_S, IQ3_XXS, IQ2_XS and IQ4_XS with and without an
importance matrix, each file scored by `localllm perplexity` and by llama.cpp's `llama-perplexity`
(benchmarks/llamacpp_tools_build.py), for docs/quantization.md.

* The models: SmolLM2-135M Q4_1, Qwen2.5-Coder-0.5B-Instruct Q4_K_M and Gemma3-270M Q4_K_M, the
  only weights cached here. Each preset re-quantizes them (`localllm quantize --allow-requantize`,
  as `llama-quantize --allow-requantize` does: every tensor dequantized to F32, then quantized), so
  the weights quantized are Q4_1's / Q4_K_M's values, not the original BF16 ones.
* Calibration: the docstrings of a fixed list of Python standard-library modules and their public
  members (English prose about software, nothing of the evaluation text). The imatrix is ours
  (`localllm imatrix`, 512-token chunks), collected on the cached quantized file itself, one per
  model.
* Each file is quantized once, by localllm; `llama-quantize` quantizes the same input with the same
  imatrix for the presets of --verify, and the two files are compared (whole file with `cmp`, and
  tensor by tensor). Where they differ, llama-perplexity also scores llama.cpp's own file.
* Evaluation: perplexity at c=512 over the whole of tests/data/corpus/gpl-3.txt, both tools with
  the same threads, on the same file. Without an imatrix both tools refuse IQ2_XS / IQ3_XXS where
  some tensor would get that type (those rows record the refusal); where every such tensor falls
  back to another type, both accept and the row is measured.

Rows are appended to the JSON file (--out) as they finish, and a rerun skips the rows already
there (quantized files and imatrices are kept in --work), so a partial run is not lost.

    python benchmarks/imatrix_quality.py [--models smollm2,qwen2.5,gemma3] [--presets ...]
        [--threads 2] [--chunks 20] [--out benchmarks/results/imatrix_quality_DATE.json]
    python benchmarks/imatrix_quality.py --table FILE.json     # the markdown table of a run
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import inspect
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from llamacpp_tools_build import ensure_llamacpp_tools
from machine import cpu_model, localllm_isa

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus" / "gpl-3.txt"
CALIBRATION_MODULES = ["argparse", "asyncio", "collections", "concurrent.futures", "csv", "dataclasses", "datetime",
                       "email.message", "functools", "http.client", "inspect", "itertools", "json", "logging",
                       "pathlib", "pickle", "random", "re", "shutil", "sqlite3", "string", "subprocess",
                       "tarfile", "textwrap", "threading", "typing", "unittest", "urllib.request", "zipfile"]
# Cheapest first: a partial run has the small models complete.
MODELS = {"smollm2": ("smollm2-135m-q4_1", "SmolLM2-135M (Q4_1)"),
          "qwen2.5": ("qwen2.5-coder-0.5b-q4_k_m", "Qwen2.5-Coder-0.5B (Q4_K_M)"),
          "gemma3": ("gemma3-270m-q4_k_m", "Gemma3-270M (Q4_K_M)")}
PRESETS = ["q2_k", "q3_k_s", "iq3_xxs", "iq2_xs", "iq4_xs"]
NEEDS_IMATRIX = {"iq3_xxs", "iq2_xs", "iq2_xxs", "iq2_s", "q2_k_s"}


def calibration_text() -> str:
    """The calibration text: each module's docstring, then its public members' (sorted by name)."""
    parts = []
    for name in CALIBRATION_MODULES:
        mod = importlib.import_module(name)
        parts.append(inspect.getdoc(mod) or "")
        for member_name, member in sorted(vars(mod).items()):
            if member_name.startswith("_") or getattr(member, "__module__", None) != mod.__name__:
                continue
            doc = inspect.getdoc(member)
            if doc:
                parts.append(f"{member_name}: {doc}")
    return "\n\n".join(p for p in parts if p)


def run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return r


def localllm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "localllm_cli", *args], check=check)


def ppl_ours(model: Path, threads: int, numerics: str = "fast") -> dict:
    t0 = time.perf_counter()
    r = localllm("perplexity", "-m", str(model), "-f", str(CORPUS), "-c", "512", "-t", str(threads),
                 "--numerics", numerics)
    out = r.stdout + r.stderr
    m = re.search(r"PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    chunks = re.search(r"chunks (\d+), scored tokens (\d+)", out)
    return {"ppl": float(m.group(1)), "stderr": float(m.group(2)), "chunks": int(chunks.group(1)),
            "seconds": round(time.perf_counter() - t0, 1)}


def ppl_llamacpp(bin_dir: Path, model: Path, threads: int) -> dict:
    t0 = time.perf_counter()
    r = run([str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(CORPUS), "-c", "512",
             "-t", str(threads), "-tb", str(threads)])
    out = r.stdout + r.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    chunks = re.search(r"calculating perplexity over (\d+) chunks", out)
    return {"ppl": float(m.group(1)), "stderr": float(m.group(2)), "chunks": int(chunks.group(1)),
            "seconds": round(time.perf_counter() - t0, 1)}


def bits_per_weight(path: Path) -> float:
    """Bits per element of the weight tensors (2-D and up)."""
    from localllm.gguf import GGUFFile
    g = GGUFFile(str(path))
    tensors = [t for t in g.tensors if len(t.shape) >= 2]
    return 8 * sum(t.nbytes for t in tensors) / sum(t.n_elements for t in tensors)


def type_counts(path: Path) -> dict[str, int]:
    """How many tensors of each type the file holds (the fallbacks of rows not a multiple of 256)."""
    from localllm.gguf import GGUFFile
    counts: dict[str, int] = {}
    for t in GGUFFile(str(path)).tensors:
        counts[t.type_name] = counts.get(t.type_name, 0) + 1
    return dict(sorted(counts.items()))


def compare_with_llama_quantize(bin_dir: Path, src: Path, ours: Path, theirs: Path, preset: str,
                                imatrix: Path | None, threads: int) -> dict:
    """llama-quantize on the same input and imatrix; whole-file `cmp` and per-tensor comparison."""
    from quantize_imatrix_vs_llamacpp import differences
    t0 = time.perf_counter()
    run([str(bin_dir / "llama-quantize"), "--allow-requantize", *(["--imatrix", str(imatrix)] if imatrix else []),
         str(src), str(theirs), preset.upper(), str(threads)])
    seconds = round(time.perf_counter() - t0, 1)
    same_file = run(["cmp", "-s", str(ours), str(theirs)], check=False).returncode == 0
    n, bad = differences(ours, theirs)
    return {"identical_file": same_file, "tensors": n, "tensors_differing": bad,
            "same_metadata": metadata(ours) == metadata(theirs), "llama_quantize_seconds": seconds}


def metadata(path: Path) -> dict:
    """The file's keys and values (order aside: llama-quantize moves general.file_type after
    general.quantization_version and writes the tensors in its own order)."""
    import gguf
    return {k: repr(f.contents()) for k, f in gguf.GGUFReader(str(path)).fields.items()}


def refusals(bin_dir: Path | None, src: Path, work: Path, preset: str) -> dict:
    """Both quantizers asked for a preset that needs an imatrix, without one."""
    out = work / f"refused-{preset}.gguf"
    r = localllm("quantize", str(src), str(out), preset, "--allow-requantize", "-q", check=False)
    row = {"localllm_refuses": r.returncode != 0, "localllm_message": (r.stdout + r.stderr).strip().splitlines()[-1:]}
    if bin_dir is not None:
        t = run([str(bin_dir / "llama-quantize"), "--allow-requantize", str(src), str(out), preset.upper(), "1"],
                check=False)
        msg = [ln.strip() for ln in (t.stdout + t.stderr).splitlines() if "importance matrix" in ln]
        row.update(llamacpp_refuses=t.returncode != 0, llamacpp_message=msg[:1])
    out.unlink(missing_ok=True)
    return row


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def save(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def table(data: dict) -> str:
    """The markdown table of a run; every expected row, those not run marked so."""
    done = {(r["model"], r["preset"], r["imatrix"]): r for r in data["rows"]}
    lines = ["| model | preset | imatrix | tensor types (count) | bits/weight | size (MiB) | PPL localllm | "
             "PPL llama.cpp | difference |", "|---|---|---|---|---|---|---|---|---|"]
    for key in data["models"]:
        label = MODELS[key][1]
        if not any(k[0] == key for k in done):
            lines.append(f"| {label} | all | both | | | | not run | not run | |")
            continue
        for preset in data["presets"]:
            for weighted in (False, True):
                r = done.get((key, preset, weighted))
                head = f"| {label} | {preset.upper()} | {'yes' if weighted else 'no'} |"
                if r is None:
                    lines.append(f"{head} | | | not run | not run | |")
                elif r.get("refused"):
                    lines.append(f"{head} | | | refuses | refuses | |")
                else:
                    ours, theirs = r["localllm"]["ppl"], r["llamacpp"]["ppl"]
                    types = ", ".join(f"{t} {n}" for t, n in sorted(r["types"].items(), key=lambda kv: -kv[1])
                                      if t != "F32")
                    lines.append(f"{head} {types} | {r['bpw']:.2f} | {r['bytes'] / 2**20:.1f} | {ours:.4f} | "
                                 f"{theirs:.4f} | {100 * (ours - theirs) / theirs:+.3f}% |")
    return "\n".join(lines)


def collect_imatrix(src: Path, calib: Path, im: Path, chunks: int, threads: int) -> subprocess.CompletedProcess:
    return localllm("imatrix", "-m", str(src), "-f", str(calib), "-o", str(im), "-c", "512", "--chunks",
                    str(chunks), "-t", str(threads), "-q")


def quantize(src: Path, out: Path, preset: str, im: Path | None, threads: int) -> None:
    """A table row's file: the source re-quantized to the preset, weighted by `im` when given."""
    localllm("quantize", str(src), str(out), preset, "--allow-requantize", "-q",
             "-t", str(threads), *(["--imatrix", str(im)] if im else []))


def row_file(work: Path, key: str, preset: str, weighted: bool) -> Path:
    return work / f"{key}-{preset}{'-imatrix' if weighted else ''}.gguf"


def ensure_imatrix(key: str, src: Path, calib: Path, work: Path, args, data: dict, out_path: Path) -> Path:
    """The model's imatrix from the calibration text, collected once and kept in `work`."""
    im = work / f"imatrix-{key}.gguf"
    if not im.exists():
        t0 = time.perf_counter()
        r = collect_imatrix(src, calib, im, args.chunks, args.threads)
        data["imatrices"][key] = {"source": src.name, "chunks": args.chunks,
                                  "seconds": round(time.perf_counter() - t0, 1),
                                  "log": (r.stdout + r.stderr).strip().splitlines()[-2:]}
        save(out_path, data)
        print(f"{MODELS[key][1]}: imatrix {data['imatrices'][key]}", flush=True)
    return im


def measure_row(key: str, src: Path, preset: str, weighted: bool, im: Path, work: Path, bin_dir: Path,
                args) -> dict:
    """One table row: the file quantized once by localllm, then both perplexity tools on it."""
    row = {"model": key, "source": src.name, "preset": preset, "imatrix": weighted}
    if not weighted and preset in NEEDS_IMATRIX:
        # Refused where some tensor gets a type that needs one; where every such tensor
        # falls back to another type (rows not a multiple of 256), both tools accept.
        row.update(refusals(bin_dir, src, work, preset))
        row["refused"] = row["localllm_refuses"]
    if row.get("refused"):
        return row
    out = row_file(work, key, preset, weighted)
    t0 = time.perf_counter()
    quantize(src, out, preset, im if weighted else None, args.threads)
    row.update(quantize_seconds=round(time.perf_counter() - t0, 1), bytes=out.stat().st_size,
               bpw=round(bits_per_weight(out), 4), types=type_counts(out))
    if weighted and preset in args.verify.split(","):
        theirs = work / f"llamacpp-{out.name}"
        row["vs_llama_quantize"] = compare_with_llama_quantize(bin_dir, src, out, theirs, preset, im, args.threads)
        if row["vs_llama_quantize"]["tensors_differing"]:
            row["llamacpp_own_file"] = ppl_llamacpp(bin_dir, theirs, args.threads)
        theirs.unlink()
    row["localllm"] = ppl_ours(out, args.threads)
    row["llamacpp"] = ppl_llamacpp(bin_dir, out, args.threads)
    row["difference_pct"] = round(100 * (row["localllm"]["ppl"] - row["llamacpp"]["ppl"])
                                  / row["llamacpp"]["ppl"], 4)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=20, help="imatrix chunks of 512 tokens at most")
    ap.add_argument("--verify", default="q2_k,iq2_xs",
                    help="presets (with the imatrix) that llama-quantize also writes, compared with ours")
    ap.add_argument("--work", default=str(Path.home() / ".cache/localllm/imatrix-quality"),
                    help="folder for the imatrices and quantized files (kept for a rerun)")
    ap.add_argument("--out", default=None, help="results JSON (default benchmarks/results/imatrix_quality_DATE.json)")
    ap.add_argument("--table", default=None, metavar="JSON", help="print the table of a results file and exit")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    from localllm import hub
    bin_dir = ensure_llamacpp_tools()
    date = datetime.date.today().isoformat()
    out_path = Path(args.out or Path(__file__).parent / "results" / f"imatrix_quality_{date}.json")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    models, presets = args.models.split(","), args.presets.split(",")
    calib = work / "calibration.txt"
    calib.write_text(calibration_text())
    commit = run(["git", "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
    data = json.loads(out_path.read_text()) if out_path.exists() else {
        "date": date, "machine": f"{cpu_model()}, localllm {localllm_isa()}, {args.threads} threads (shared machine)",
        "localllm_commit": commit, "llamacpp": "vendored in llama-cpp-python 0.3.36",
        "corpus": str(CORPUS), "corpus_sha256": sha256(CORPUS), "ctx": 512,
        "calibration": f"docstrings of {len(CALIBRATION_MODULES)} Python standard-library modules, "
                       f"python {sys.version.split()[0]}", "calibration_sha256": sha256(calib),
        "imatrix_chunks": args.chunks, "models": models, "presets": presets, "imatrices": {}, "rows": []}
    data["models"] = list(dict.fromkeys(data["models"] + models))
    data["presets"] = list(dict.fromkeys(data["presets"] + presets))
    print(f"machine: {data['machine']}; results -> {out_path}", flush=True)
    done = {(r["model"], r["preset"], r["imatrix"]) for r in data["rows"]}
    for key in models:
        hub_name = MODELS[key][0]
        src = hub.pull(hub_name, quiet=True)
        im = ensure_imatrix(key, src, calib, work, args, data, out_path)
        for preset in presets:
            for weighted in (False, True):
                if (key, preset, weighted) in done:
                    continue
                row = measure_row(key, src, preset, weighted, im, work, bin_dir, args)
                data["rows"].append(row)
                save(out_path, data)
                print(json.dumps(row), flush=True)
    print()
    print(table(data))


if __name__ == "__main__":
    main()
