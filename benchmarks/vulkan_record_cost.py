#!/usr/bin/env python3
"""Host cost of a Vulkan decode step: recording its commands afresh each step against
resubmitting the step's kept command buffer (csrc/backends/vulkan/vk_recording.h), every layer of
the model on the device (`-ngl all`), single-token greedy steps through `_core.Model.forward`.

Per decode step (the median over the measured steps; the best of -r processes per mode, modes
alternating so the machine's load hits each alike):
  host CPU     CPU time of the thread that calls forward: the backend's host code (commands,
               uploads, submission, the CPU's embedding lookup), no shader execution, which a CPU
               implementation such as lavapipe runs on threads of its own;
  process CPU  every thread of the process: on lavapipe the shaders' execution as well;
  wall, tg t/s elapsed time, and its inverse (noisy on a shared machine);
  submits, recordings, replays, record CPU  the backend's command counters
               (_core.vulkan_command_stats: command buffers recorded, kept ones resubmitted, CPU
               time inside the recording), absent from builds that lack them.

Modes: `on` (the default build: replay), `off` (LOCALLLM_VULKAN_REPLAY=0: every submission
recorded afresh), and `--baseline PYTHONPATH` adds `base`: another build's python/ directory (the
code before replay existed), measured the same way.

    python benchmarks/vulkan_record_cost.py [-m MODEL] [-n 24] [-r 3] [--baseline /other/python] [--json OUT]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WARMUP_STEPS = 3   # the first decode steps record their command buffers


def worker(path: str, n_steps: int, n_prompt: int) -> dict:
    import numpy as np

    from localllm import _core
    from localllm.gguf import GGUFFile
    meta = GGUFFile(path).metadata
    n_layer = int(meta[f"{meta['general.architecture']}.block_count"])
    block = 16
    n_blocks = (n_prompt + n_steps + WARMUP_STEPS) // block + 2
    model = _core.Model(path, 2, n_blocks + 1, block, n_gpu_layers=n_layer, device="Vulkan")
    tables = np.arange(1, n_blocks + 1, dtype=np.int32)[None, :]   # block 0 is the null block
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 1000, n_prompt).astype(np.int32)

    def width(n_tokens: int) -> int:   # the engine's table width: the blocks the sequence holds
        return (n_tokens + block - 1) // block

    logits = model.forward(tokens, np.arange(n_prompt, dtype=np.int32), np.zeros(n_prompt, np.int32),
                           np.ascontiguousarray(tables[:, :width(n_prompt)]), np.array([n_prompt - 1], np.int32))
    has_stats = hasattr(_core, "vulkan_command_stats")
    out = np.empty((1, logits.shape[1]), np.float32)
    rows = {"host_cpu": [], "process_cpu": [], "wall": []}
    stats = None
    for step in range(WARMUP_STEPS + n_steps):
        if step == WARMUP_STEPS and has_stats:
            _core.vulkan_command_stats(reset=True)
        pos = n_prompt + step
        tok = np.array([int(np.argmax(logits[-1]))], np.int32)
        table = np.ascontiguousarray(tables[:, :width(pos + 1)])
        t0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
        logits = model.forward(tok, np.array([pos], np.int32), np.zeros(1, np.int32), table,
                               np.zeros(1, np.int32), out=out)
        t1, p1, w1 = time.thread_time(), time.process_time(), time.perf_counter()
        if step >= WARMUP_STEPS:
            rows["host_cpu"].append(t1 - t0)
            rows["process_cpu"].append(p1 - p0)
            rows["wall"].append(w1 - w0)
    if has_stats:
        stats = {k: v / n_steps for k, v in _core.vulkan_command_stats(reset=True).items()
                 if not k.startswith("largest_")}   # maxima, not totals
    return {"median": {k: statistics.median(v) for k, v in rows.items()}, "per_step": stats,
            "device": _core.vulkan_device_name(0) if hasattr(_core, "vulkan_device_name") else "?"}


def run_worker(mode: str, python_dir: str, path: str, args) -> dict:
    code = ("import json, vulkan_record_cost as b; "
            f"print('RESULT ' + json.dumps(b.worker({path!r}, {args.n_steps}, {args.n_prompt})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), python_dir]),
           "LOCALLLM_VULKAN_ALLOW_CPU": "1"}
    env.pop("LOCALLLM_VULKAN_VALIDATE", None)   # the validation layer's own cost is not the backend's
    if mode == "off":
        env["LOCALLLM_VULKAN_REPLAY"] = "0"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} worker failed:\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m-q4_1")
    ap.add_argument("-n", "--n-steps", type=int, default=24, help="measured decode steps per process")
    ap.add_argument("-p", "--n-prompt", type=int, default=8)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="another build's python/ directory, measured as 'base'")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.n_steps < 1 or args.repetitions < 1 or args.n_prompt < 1:
        raise SystemExit("-n, -r and -p must be >= 1")
    sys.path.insert(0, str(REPO / "python"))
    from localllm import _core, hub
    from machine import describe, line as machine_line
    path = str(hub.resolve_model(args.model))
    machine = describe(2)
    print(machine_line(machine))
    devices = [d for d in _core.vulkan_devices() if d["usable"]]
    print("Vulkan devices: " + "; ".join(f"{d['name']} ({d['type']}, {d['driver']})" for d in devices) +
          f"; model {os.path.basename(path)}; {datetime.date.today()}", flush=True)
    modes = [("on", str(REPO / "python")), ("off", str(REPO / "python"))]
    if args.baseline:
        modes.append(("base", args.baseline))
    results: dict[str, list[dict]] = {m: [] for m, _ in modes}
    for rep in range(args.repetitions):
        for mode, python_dir in modes:
            results[mode].append(run_worker(mode, python_dir, path, args))
            print(f"  rep {rep + 1} {mode}: {json.dumps(results[mode][-1]['median'])}", flush=True)
    print(f"\nper decode step, best of {args.repetitions} processes (median of {args.n_steps} steps each):")
    print("| mode | host CPU ms | process CPU ms | wall ms | tg t/s | submits | recordings | record CPU ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for mode, _ in modes:
        best = {k: min(r["median"][k] for r in results[mode]) for k in ("host_cpu", "process_cpu", "wall")}
        per = results[mode][0]["per_step"]
        summary[mode] = {**best, "per_step": per}
        cols = (f"{per['submits']:.2f} | {per['recordings']:.2f} | {per['record_cpu_s'] * 1e3:.2f}"
                if per else "n/a | n/a | n/a")
        print(f"| {mode} | {best['host_cpu'] * 1e3:.2f} | {best['process_cpu'] * 1e3:.1f} | {best['wall'] * 1e3:.1f} | "
              f"{1.0 / best['wall']:.2f} | {cols} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "devices": devices, "model": path,
                                               "date": str(datetime.date.today()), "summary": summary,
                                               "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
