"""`localllm info [MODEL]`: what a GGUF file holds (architecture, sizes, tokenizer, tensors)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from localllm import hub
from localllm.gguf import GGUFFile, model_summary

from .common import add_cache_type_args, add_device_args, add_numerics_arg, device_kwargs, parse_size

__all__ = ["register", "run_info"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarise a GGUF model (metadata, hyper-parameters, tensors)")
    p.add_argument("model", nargs="?", default=None,
                   help=f"path to a .gguf file or a known model name (default {hub.DEFAULT_MODEL})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--devices", action="store_true",
                   help="list the devices this build can run on (the CPU, each Vulkan device) and exit")
    p.add_argument("--tensors", action="store_true",
                   help="also list every tensor (name, type, shape in ggml order, file offset)")
    p.add_argument("--plan", action="store_true",
                   help="print where -ngl puts the layers and the bytes each device will be asked "
                        "for (weights, KV, scratch), without loading the model")
    p.add_argument("-c", "--ctx-size", type=int, default=None, help="with --plan: context (default 4096)")
    p.add_argument("-b", "--batch-size", type=int, default=512, help="with --plan: largest batch (tokens)")
    p.add_argument("--kv-blocks", type=int, default=None, metavar="N",
                   help="with --plan: KV pool in blocks of 16 tokens (default: the context's)")
    p.add_argument("--gpu-free", type=parse_size, default=None, metavar="SIZE",
                   help="with --plan: simulate a GPU with this much free memory")
    add_device_args(p)
    add_numerics_arg(p)
    add_cache_type_args(p)
    p.set_defaults(func=run_info)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def _tensor_rows(f: GGUFFile) -> list[dict[str, Any]]:
    return [{"name": t.name, "type": t.type_name, "shape": list(t.shape), "offset": t.offset,
             "nbytes": t.nbytes} for t in f.tensors]


def _print_summary(s: dict[str, Any]) -> None:
    def row(label: str, value: Any) -> None:
        if value is not None:
            print(f"{label:<16} {value}")

    row("file", s["path"])
    row("size", f"{_size(s['file_size'])} (GGUF v{s['gguf_version']}, {s['n_metadata']} keys, "
                f"{s['n_tensors']} tensors, alignment {s['alignment']})")
    row("architecture", s["architecture"])
    row("name", s["name"])
    row("parameters", f"{_count(s['n_params'])} ({s['n_params']:,})")
    if s["file_type"] is not None:
        row("file type", f"{s['file_type_name'] or 'unknown'} ({s['file_type']})")
    types = ", ".join(f"{name} x{h['count']} ({_size(h['bytes'])})"
                      for name, h in s["tensor_types"].items())
    row("tensor types", types)
    row("context length", s["context_length"])
    row("layers", s["n_layers"])
    row("embedding", s["n_embd"])
    row("feed-forward", s["n_ff"])
    heads = s["n_head"]
    if heads is not None:
        row("heads", f"{heads} (kv {s['n_head_kv']}, head dim {s['head_dim']})")
    row("rope base", s["rope_freq_base"])
    tok = s["tokenizer_model"]
    if tok is not None:
        pre = f", pre {s['tokenizer_pre']}" if s["tokenizer_pre"] else ""
        row("tokenizer", f"{tok}{pre}, vocab {s['vocab_size']}")
    else:
        row("vocab", s["vocab_size"])
    row("chat template", "yes" if s["has_chat_template"] else "no")


def plan_for(args: argparse.Namespace, path: str):
    """The plan `info --plan` prints: -ngl against --gpu-free (or the GPU's free memory)."""
    from localllm import _core
    from localllm.plan import gpu_free_bytes, plan_layers
    if args.ctx_size is not None and args.ctx_size < 1:
        raise ValueError(f"-c must be >= 1, got {args.ctx_size}")
    if args.batch_size < 1 or (args.kv_blocks is not None and args.kv_blocks < 1):
        raise ValueError("-b and --kv-blocks must be >= 1")
    from localllm.llm import device_spec
    dev = device_kwargs(args)
    spec = device_spec(dev["device"])   # the plan's bytes are that backend's
    footprint = _core.Footprint(path, args.numerics)
    gpu_free = args.gpu_free if args.gpu_free is not None else gpu_free_bytes(spec)
    n_ctx = args.ctx_size or 4096
    pool = None if args.kv_blocks is None else args.kv_blocks + 1
    def bytes_of(ngl: int, kv_blocks: int, kv_block_size: int, n_batch: int) -> dict:
        return footprint.bytes(ngl, kv_blocks, kv_block_size, n_batch, args.cache_type_k, args.cache_type_v,
                               device=spec)

    plan = plan_layers(bytes_of, footprint.n_layer, dev["n_gpu_layers"], n_ctx=n_ctx,
                       kv_block_size=16, n_batch=args.batch_size, kv_blocks=pool,
                       ctx_set=args.ctx_size is not None, gpu_free=gpu_free,
                       gpu_margin=dev["gpu_margin"], gpu_layers_max=footprint.gpu_layers_max)
    if gpu_free is None and plan.n_gpu_layers:
        plan.notes.append("no GPU free memory known (no GPU, or no CUDA backend in this build): "
                          "pass --gpu-free to check the fit")
    return plan


def _devices() -> list[dict[str, Any]]:
    import os
    import platform

    from localllm import _core
    pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGESIZE")
    avail = os.sysconf("SC_AVPHYS_PAGES") if "SC_AVPHYS_PAGES" in os.sysconf_names else pages
    rows = [{"device": "cpu", "name": platform.processor() or platform.machine(), "type": "cpu",
             "total_bytes": pages * page, "free_bytes": avail * page}]
    for d in _core.vulkan_devices():
        rows.append({"device": f"vulkan:{d['index']}", **d})
    return rows


def print_devices(as_json: bool) -> int:
    rows = _devices()
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'DEVICE':<10} {'TYPE':<11} {'TOTAL':>9} {'FREE':>9}  NAME")
    for r in rows:
        note = "" if r.get("usable", True) else f"  (unusable: {r['unusable_reason']})"
        note += "  (default)" if r.get("default") else ""
        print(f"{r['device']:<10} {r['type']:<11} {_size(r['total_bytes']):>9} {_size(r['free_bytes']):>9}  "
              f"{r['name']}{note}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    if args.devices:
        return print_devices(args.json)
    path = hub.resolve_model(args.model)
    if args.plan:
        plan = plan_for(args, str(path))
        if args.json:
            print(json.dumps({"n_layer": plan.n_layer, "n_gpu_layers": plan.n_gpu_layers,
                              "n_ctx": plan.n_ctx, "kv_blocks": plan.kv_blocks,
                              "gpu_budget": plan.gpu_budget, "fits": plan.fits,
                              "devices": {k: {"weights": d.weights, "kv": d.kv, "scratch": d.scratch,
                                              "total": d.total} for k, d in plan.devices.items()},
                              "notes": plan.notes}, indent=2))
        else:
            print(plan.describe())
        return 0 if plan.fits else 1
    f = GGUFFile(path)
    summary = model_summary(path, gguf=f)
    if args.json:
        if args.tensors:
            summary["tensors"] = _tensor_rows(f)
        print(json.dumps(summary, indent=2))
        return 0
    _print_summary(summary)
    if args.tensors:
        rows = _tensor_rows(f)
        width = max((len(r["name"]) for r in rows), default=4)
        print(f"\n{'NAME':<{width}}  {'TYPE':<6} {'SHAPE':<22} {'OFFSET':>12}")
        for r in rows:
            shape = "x".join(str(d) for d in r["shape"])
            print(f"{r['name']:<{width}}  {r['type']:<6} {shape:<22} {r['offset']:>12}")
    return 0
