"""`localllm convert HF_DIR -o OUT.gguf [--type ...]`: Hugging Face checkpoint -> GGUF."""
from __future__ import annotations

import argparse
import sys

__all__ = ["register", "run_convert", "print_result"]

from localllm_convert.filetypes import PRESETS

_TYPES = list(PRESETS)   # the converter's presets (llama.cpp's file types it can write)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a Hugging Face checkpoint to GGUF (quantizing "
                                       "in the same pass)")
    p.add_argument("hf_dir", help="checkpoint directory (config.json, *.safetensors, tokenizer)")
    p.add_argument("-o", "--outfile", default=None, help="output .gguf file")
    p.add_argument("--type", "--outtype", dest="type", default="f16", type=str.lower,
                   choices=_TYPES, help="output type (default f16); the K-quant and IQ4 presets "
                                        "mix types per tensor as llama.cpp does")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all)")
    p.add_argument("--vocab-only", action="store_true", help="write only metadata and vocabulary")
    p.add_argument("--dry-run", action="store_true",
                   help="check the checkpoint and print the plan (tensor types, sizes); write nothing")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_convert)


def print_result(result, plan: bool, out=None) -> None:
    """Print a conversion result: the per-tensor plan (when asked) and the summary."""
    out = out if out is not None else sys.stdout
    if plan:
        for t in result.tensors:
            note = f"  (fallback from {t.fallback_from.name})" if t.fallback_from else ""
            shape = "x".join(str(d) for d in reversed(t.shape))
            print(f"{t.name:40} {shape:>16} {t.qtype.name:>5} {t.nbytes / 1e6:9.2f} MB{note}",
                  file=out)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.type_counts.items()))
    mb_in, mb_out = result.input_bytes / 1e6, result.output_bytes / 1e6
    rate = mb_in / result.seconds if result.seconds > 0 else 0.0
    where = f" -> {result.path}" if result.path else " (dry run, nothing written)"
    print(f"{result.architecture} {result.file_type}: {len(result.tensors)} tensors ({counts}); "
          f"{mb_in:.1f} MB -> {mb_out:.1f} MB in {result.seconds:.1f} s ({rate:.0f} MB/s){where}",
          file=out)


def run_convert(args: argparse.Namespace) -> int:
    from localllm_convert import convert
    if args.outfile is None and not args.dry_run:
        raise ValueError("an output file is needed: -o OUT.gguf")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    result = convert(args.hf_dir, args.outfile, type=args.type, threads=args.threads,
                     vocab_only=args.vocab_only, dry_run=args.dry_run,
                     progress=False if args.quiet else None)
    print_result(result, plan=args.dry_run)
    return 0
