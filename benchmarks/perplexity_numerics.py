#!/usr/bin/env python3
"""The perplexity table of an imatrix_quality run again, scored by localllm in both of its numerics:
the fast ones (the default) and `--numerics llama.cpp` (ggml's float order in the forward), each
against the llama-perplexity figure that run recorded for the same file.

The files are made again exactly as imatrix_quality.py makes them (its imatrix command and
quantize presets, the same calibration text and chunks), in the same work folder. That they are the
same files is checked, not assumed: for the rows of --verify-rows, the fast numerics' figure must
equal the recorded one to its four decimals (any other tensor byte would move it), else the
script stops. The other rows are scored in the llama.cpp numerics only, unless --all-fast.

    python benchmarks/perplexity_numerics.py --results benchmarks/results/imatrix_quality_2026-12-06.json
        [--models gemma3,smollm2] [--threads 2] [--all-fast] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import imatrix_quality as iq
from machine import describe, line


def source_row(key: str) -> dict:
    """The cached model itself, the row every preset re-quantizes (its llama.cpp figure: none recorded)."""
    return {"model": key, "preset": "source", "imatrix": False}


def files_for(key: str, rows: list[dict], results: dict, work: Path, threads: int) -> tuple[Path, dict]:
    """The source model and, for each measured row, its file made again when missing."""
    from localllm import hub
    src = hub.pull(iq.MODELS[key][0], quiet=True)
    calib = work / "calibration.txt"
    calib.write_text(iq.calibration_text())
    if iq.sha256(calib) != results["calibration_sha256"]:
        sys.exit(f"the calibration text differs from the run's ({results['calibration']}): another Python?")
    im = work / f"imatrix-{key}.gguf"
    if any(r["imatrix"] for r in rows) and not im.exists():
        iq.collect_imatrix(src, calib, im, results["imatrix_chunks"], threads)
    files = {}
    for r in rows:
        out = iq.row_file(work, key, r["preset"], r["imatrix"])
        if not out.exists():
            iq.quantize(src, out, r["preset"], im if r["imatrix"] else None, threads)
        files[(r["preset"], r["imatrix"])] = out
    return src, files


def score(row: dict, path: Path, threads: int, fast: bool, verify: bool) -> dict:
    out = {"model": row["model"], "preset": row["preset"], "imatrix": row["imatrix"],
           "llamacpp": row.get("llamacpp", {}).get("ppl"), "recorded_fast": row.get("localllm", {}).get("ppl")}
    if fast or verify:
        out["fast"] = iq.ppl_ours(path, threads)["ppl"]
        if verify and out["fast"] != out["recorded_fast"]:
            sys.exit(f"{path.name}: fast numerics {out['fast']} against the recorded {out['recorded_fast']}: "
                     "not the same file (or the runtime's figure moved), so the recorded llama.cpp figure "
                     "does not apply")
    out["llamacpp_numerics"] = iq.ppl_ours(path, threads, numerics="llama.cpp")["ppl"]
    if out["llamacpp"]:
        for k in ("fast", "llamacpp_numerics"):
            if k in out:
                out[f"{k}_difference_pct"] = round(100 * (out[k] - out["llamacpp"]) / out["llamacpp"], 4)
    print(json.dumps(out), flush=True)
    return out


def cell(row: dict, key: str) -> str:
    """A figure with its difference from llama.cpp's, or nothing where it was not run."""
    if key not in row:
        return ""
    diff = row.get(f"{key}_difference_pct")
    return f"{row[key]:.4f}" + (f" ({diff:+.2f}%)" if diff is not None else "")


def table(rows: list[dict]) -> str:
    lines = ["| model | preset | imatrix | llama.cpp | localllm fast | localllm `--numerics llama.cpp` |",
             "|---|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {iq.MODELS[r['model']][1]} | {r['preset'].upper()} | {'yes' if r['imatrix'] else 'no'} | "
                     f"{r['llamacpp'] or ''} | {cell(r, 'fast')} | {cell(r, 'llamacpp_numerics')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="an imatrix_quality.py results JSON")
    ap.add_argument("--models", default="gemma3,smollm2,qwen2.5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--verify-rows", type=int, default=2,
                    help="rows per model (first with and first without an imatrix) whose fast figure is rerun "
                         "and must equal the recorded one")
    ap.add_argument("--all-fast", action="store_true", help="rerun the fast numerics on every row")
    ap.add_argument("--work", default=str(Path.home() / ".cache/localllm/imatrix-quality"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = json.loads(Path(args.results).read_text())
    date = datetime.date.today().isoformat()
    out_path = Path(args.out or Path(__file__).parent / "results" / f"perplexity_numerics_{date}.json")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = {"date": date, "machine": describe(args.threads), "results_of": Path(args.results).name,
            "commit": iq.run(["git", "rev-parse", "--short", "HEAD"], check=False).stdout.strip(), "rows": []}
    print(line(data["machine"]), file=sys.stderr)
    for key in args.models.split(","):
        rows = [r for r in results["rows"] if r["model"] == key and not r.get("refused")]
        src, files = files_for(key, rows, results, work, args.threads)
        verify = [next(r for r in rows if r["imatrix"] is w) for w in (False, True)][:args.verify_rows]
        data["rows"].append(score(source_row(key), src, args.threads, True, False))
        for r in rows:
            data["rows"].append(score(r, files[(r["preset"], r["imatrix"])], args.threads, args.all_fast,
                                      any(r is v for v in verify)))
            out_path.write_text(json.dumps(data, indent=1) + "\n")
    print(table(data["rows"]))


if __name__ == "__main__":
    main()
