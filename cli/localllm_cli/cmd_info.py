"""`localllm info [MODEL]`: what a GGUF file holds (architecture, sizes, tokenizer, tensors)."""
from __future__ import annotations

import argparse
import json
from typing import Any

from localllm import hub
from localllm.gguf import GGUFFile, model_summary

__all__ = ["register", "run_info"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarise a GGUF model (metadata, hyper-parameters, tensors)")
    p.add_argument("model", nargs="?", default=None,
                   help=f"path to a .gguf file or a known model name (default {hub.DEFAULT_MODEL})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--tensors", action="store_true",
                   help="also list every tensor (name, type, shape in ggml order, file offset)")
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


def run_info(args: argparse.Namespace) -> int:
    path = hub.resolve_model(args.model)
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
