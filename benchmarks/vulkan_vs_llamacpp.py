#!/usr/bin/env python3
"""localllm's Vulkan backend vs llama.cpp's (ggml-vulkan) on the same Vulkan device, same model,
same pp/tg, in one run: by default Mesa's lavapipe (the CPU implementation CI has), or any device
with --device-name. llama.cpp is `llama-bench` built by llamacpp_vulkan_build.py from the llama.cpp
source the other benchmarks use; localllm runs `--device vulkan -ngl all` (localllm.bench's method,
llama-bench's: random tokens, a warm-up, pp = one batch from an empty cache, tg = single-token
steps), with its float matrix-vector kernels and, where the device has integer dot products, again
with LOCALLLM_VULKAN_INT8=1 (the "int8" row). Each engine runs in processes of its own, alternating, `-r` repetitions each; the ratio is
localllm's t/s over llama.cpp's. For context both engines' CPU backends are measured too (--no-cpu
skips them).

--profile runs both engines' decode under vk_call_counter.so (vk_call_counter.cpp, compiled here):
two runs per engine, n and 3n generated tokens, so the difference over 2n tokens is the cost of one
token (load and warm-up cancel): Vulkan submissions, fence waits (and milliseconds in them),
dispatches, barriers, descriptor writes, buffers and memory allocated.

llama.cpp takes no CPU implementation unless named: GGML_VK_VISIBLE_DEVICES selects the device
(its index in vkEnumeratePhysicalDevices order, which localllm's device list keeps), and the device
llama-bench reports (gpu_info) is checked against the one localllm used.

    python benchmarks/vulkan_vs_llamacpp.py [-m MODEL] [-p 32] [-n 16] [-r 2] [-t 2] [--profile] [--json OUT]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llamacpp_vulkan_build import ensure_llama_bench_vulkan
from machine import describe, line as machine_line

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COUNTER_SRC = HERE / "vk_call_counter.cpp"


# ---- localllm worker: runs in a fresh process, prints one JSON line ----

def worker_localllm(path: str, device: str, threads: int, n_prompt: int, n_gen: int, reps: int) -> dict:
    import numpy as np

    from localllm import LLM, _core
    from localllm.bench import bench_generation, bench_prompt
    ngl = "all" if device == "vulkan" else 0
    llm = LLM(path, n_threads=threads, n_ctx=max(n_prompt, n_gen, 16) + 16, n_batch=max(n_prompt, 1),
              n_gpu_layers=ngl, device=device)
    rng = np.random.default_rng(0)
    out = {"device": _core.vulkan_device_name(0) if device == "vulkan" else "CPU",
           "n_gpu_layers": llm.n_gpu_layers, "threads": llm.n_threads}
    if n_prompt:
        bench_prompt(llm, min(n_prompt, 8), rng)                     # warm-up
        out["pp"] = [n_prompt * 1e9 / bench_prompt(llm, n_prompt, rng) for _ in range(reps)]
    if n_gen:
        bench_generation(llm, min(n_gen, 4), rng)                    # warm-up
        out["tg"] = [n_gen * 1e9 / bench_generation(llm, n_gen, rng) for _ in range(reps)]
    return out


def run_localllm(path: str, device: str, args, n_prompt: int, n_gen: int, reps: int,
                 env: dict | None = None) -> tuple[dict, str]:
    code = ("import json, sys, vulkan_vs_llamacpp as b; "
            f"print('RESULT ' + json.dumps(b.worker_localllm({path!r}, {device!r}, {args.threads}, "
            f"{n_prompt}, {n_gen}, {reps})))")
    pythonpath = os.pathsep.join([str(HERE), str(REPO / "python"), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"localllm worker failed:\n{proc.stderr[-3000:]}")
    result = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(result[len("RESULT "):]), proc.stderr


# ---- llama.cpp: llama-bench ----

def run_llama_bench(binary: Path, path: str, vk_index: int | None, args, n_prompt: int, n_gen: int,
                    reps: int, env: dict | None = None) -> tuple[dict, str]:
    """llama-bench's pp/tg samples (t/s) on the Vulkan device vk_index, or the CPU alone (None: no
    Vulkan device is visible to it, so every op runs on ggml-cpu)."""
    run_env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    if vk_index is not None:
        run_env["GGML_VK_VISIBLE_DEVICES"] = str(vk_index)
    cmd = [str(binary), "-m", path, "-t", str(args.threads), "-r", str(reps), "-o", "json",
           "-ngl", "99" if vk_index is not None else "0", "-p", str(n_prompt), "-n", str(n_gen)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**run_env, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    rows = json.loads(proc.stdout)
    device = rows[0].get("gpu_info", "") if vk_index is not None else "CPU"
    out: dict = {"device": device, "backends": rows[0].get("backends", ""),
                 "threads": rows[0].get("n_threads")}
    for r in rows:
        out["pp" if r["n_prompt"] else "tg"] = r["samples_ts"]
    return out, proc.stderr


# ---- the comparison ----

def lavapipe_or_named(name: str | None) -> dict:
    from localllm import _core
    devices = [d for d in _core.vulkan_devices() if d["usable"]]
    for d in devices:
        if (name and name.lower() in d["name"].lower()) or (not name and d["type"] == "cpu"):
            return d
    raise SystemExit(f"no usable Vulkan device {'named ' + name if name else 'of type cpu (lavapipe)'}; "
                     f"found {[d['name'] for d in devices]}")


def mean_sd(xs: list[float]) -> str:
    return f"{statistics.fmean(xs):.2f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.2f}"


def compare(args, binary: Path, path: str, device: dict) -> dict:
    rows: dict = {"localllm vulkan": {"pp": [], "tg": []}, "llama.cpp vulkan": {"pp": [], "tg": []}}
    int8 = device["features"]["VK_KHR_shader_integer_dot_product"]
    if int8:   # the integer-dot matrix-vector kernels, asked for where the driver does not call them fast
        rows["localllm vulkan int8"] = {"pp": [], "tg": []}
    if args.cpu:
        rows.update({"localllm cpu": {"pp": [], "tg": []}, "llama.cpp cpu": {"pp": [], "tg": []}})
    env = {"LOCALLLM_VULKAN_ALLOW_CPU": "1"}
    for rep in range(args.repetitions):     # alternating: machine noise hits both engines alike
        runs = [("localllm vulkan", lambda: run_localllm(path, "vulkan", args, args.n_prompt, args.n_gen, 1, env)),
                ("llama.cpp vulkan", lambda: run_llama_bench(binary, path, device["index"], args,
                                                             args.n_prompt, args.n_gen, 1))]
        if int8:
            runs.append(("localllm vulkan int8", lambda: run_localllm(path, "vulkan", args, args.n_prompt, args.n_gen,
                                                                      1, {**env, "LOCALLLM_VULKAN_INT8": "1"})))
        if args.cpu:
            runs += [("localllm cpu", lambda: run_localllm(path, "cpu", args, args.n_prompt, args.n_gen, 1)),
                     ("llama.cpp cpu", lambda: run_llama_bench(binary, path, None, args, args.n_prompt,
                                                               args.n_gen, 1))]
        for name, fn in runs:
            res, _ = fn()
            row = rows[name]
            row.update({k: v for k, v in res.items() if k not in ("pp", "tg")})
            for k in ("pp", "tg"):
                row[k] += res.get(k, [])
            print(f"  rep {rep + 1} {name}: pp{args.n_prompt} {res.get('pp')} tg{args.n_gen} {res.get('tg')}",
                  file=sys.stderr, flush=True)
    check_same_device(rows, device)
    return rows


def check_same_device(rows: dict, device: dict) -> None:
    llama = rows["llama.cpp vulkan"]
    if "Vulkan" not in llama["backends"] or device["name"] not in llama["device"]:
        raise SystemExit(f"llama-bench ran on {llama['device']!r} ({llama['backends']}), "
                         f"not on {device['name']!r}")
    if rows["localllm vulkan"]["device"] != device["name"]:
        raise SystemExit(f"localllm ran on {rows['localllm vulkan']['device']!r}, not on {device['name']!r}")


def print_table(rows: dict, args, device: dict) -> None:
    pp, tg = f"pp{args.n_prompt}", f"tg{args.n_gen}"
    print(f"\n| engine | device | threads | {pp} t/s | {tg} t/s |")
    print("|---|---|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['device']} | {r['threads']} | {mean_sd(r['pp'])} | {mean_sd(r['tg'])} |")
    cv = rows["llama.cpp vulkan"]
    for name in ("localllm vulkan", "localllm vulkan int8"):
        if name not in rows:
            continue
        for k, label in (("pp", pp), ("tg", tg)):
            ratio = statistics.fmean(rows[name][k]) / statistics.fmean(cv[k])
            print(f"{label}: {name} / llama.cpp Vulkan on {device['name']} = {ratio:.3f}")


# ---- --profile: Vulkan calls per decoded token ----

def counter_library() -> Path:
    out = Path(tempfile.gettempdir()) / "localllm-vk_call_counter.so"
    if not out.exists() or out.stat().st_mtime < COUNTER_SRC.stat().st_mtime:
        subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-std=c++17", str(COUNTER_SRC), "-o", str(out), "-ldl"],
                       check=True)
    return out


def parse_counts(stderr: str) -> dict[str, tuple[int, float]]:
    counts = {}
    for ln in stderr.splitlines():
        if ln.startswith("vk_call_counter ") and len(ln.split()) == 4:
            _, name, n, ms = ln.split()
            counts[name] = (int(n), float(ms))
    return counts


def profile(args, binary: Path, path: str, device: dict) -> dict:
    """Per decoded token: each counted call's number and milliseconds, from runs of n and 3n tokens."""
    lib = counter_library()
    n1, n2 = args.profile_tokens, 3 * args.profile_tokens
    engines = {
        "localllm": lambda n: run_localllm(path, "vulkan", args, 0, n, 1,
                                           {"LOCALLLM_VULKAN_LOADER": str(lib), "LOCALLLM_VULKAN_ALLOW_CPU": "1"}),
        "llama.cpp": lambda n: run_llama_bench(binary, path, device["index"], args, 0, n, 1,
                                               {"LD_PRELOAD": str(lib)}),
    }
    out = {}
    for name, run in engines.items():
        (_, e1), (r2, e2) = run(n1), run(n2)
        c1, c2 = parse_counts(e1), parse_counts(e2)
        if not c2:
            raise SystemExit(f"{name}: vk_call_counter reported nothing (was the library loaded?)")
        per_token = {}
        for call in sorted(c2):
            dn = c2[call][0] - c1.get(call, (0, 0.0))[0]
            dms = c2[call][1] - c1.get(call, (0, 0.0))[1]
            per_token[call] = {"calls": dn / (n2 - n1), "ms": dms / (n2 - n1)}
        out[name] = {"per_token": per_token, "tg_ts": r2["tg"][0]}
    print(f"\nVulkan calls per decoded token (runs of {n1} and {n2} tokens; ms = time inside the call)")
    print("| call | localllm calls | localllm ms | llama.cpp calls | llama.cpp ms |")
    print("|---|---:|---:|---:|---:|")
    for call in sorted(set(out["localllm"]["per_token"]) | set(out["llama.cpp"]["per_token"])):
        cells = []
        for name in ("localllm", "llama.cpp"):
            v = out[name]["per_token"].get(call, {"calls": 0.0, "ms": 0.0})
            cells += [f"{v['calls']:.1f}", f"{v['ms']:.2f}"]
        print(f"| {call} | " + " | ".join(cells) + " |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m-q4_1")
    ap.add_argument("-p", "--n-prompt", type=int, default=32)
    ap.add_argument("-n", "--n-gen", type=int, default=16)
    ap.add_argument("-r", "--repetitions", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device-name", default=None, help="a Vulkan device whose name contains this "
                    "(default: the CPU implementation, lavapipe)")
    ap.add_argument("--no-cpu", dest="cpu", action="store_false", help="skip the CPU backends' rows")
    ap.add_argument("--profile", action="store_true", help="count Vulkan calls per decoded token")
    ap.add_argument("--profile-tokens", type=int, default=4, help="--profile's n (default 4)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if args.repetitions < 1 or args.n_prompt < 1 or args.n_gen < 1:
        raise SystemExit("-r, -p and -n must be >= 1")

    sys.path.insert(0, str(REPO / "python"))
    from localllm import hub
    path = str(hub.resolve_model(args.model))
    binary = ensure_llama_bench_vulkan()
    device = lavapipe_or_named(args.device_name)
    machine = describe(args.threads)
    print(machine_line(machine))
    print(f"Vulkan device: {device['name']} ({device['type']}, {device['driver']}, API {device['api_version']}); "
          f"LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS', 'unset (lavapipe: one thread per CPU)')}; "
          f"model {os.path.basename(path)}; {datetime.date.today()}", flush=True)
    result = {"machine": machine, "device": device, "model": path, "date": str(datetime.date.today()),
              "n_prompt": args.n_prompt, "n_gen": args.n_gen}
    result["rows"] = compare(args, binary, path, device)
    print_table(result["rows"], args, device)
    if args.profile:
        result["profile"] = profile(args, binary, path, device)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
