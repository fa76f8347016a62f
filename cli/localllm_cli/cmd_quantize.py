"""`localllm quantize IN.gguf OUT.gguf TYPE`: re-quantize an F32/F16/BF16 GGUF file."""
from __future__ import annotations

import argparse

from .cmd_convert import _TYPES_HELP, check_type, import_converter, print_result

__all__ = ["register", "run_quantize"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="re-quantize an F32/F16/BF16 GGUF file (llama.cpp's "
                                        "mixture rules for the K-quant presets)")
    p.add_argument("input", help="input .gguf")
    p.add_argument("output", help="output .gguf")
    p.add_argument("type", type=str.lower, help=_TYPES_HELP.replace(" (default)", ""))
    p.add_argument("--allow-requantize", action="store_true",
                   help="accept an input that is already quantized (dequantized first: lossy)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all)")
    p.add_argument("--imatrix", default=None, metavar="FILE",
                   help="importance matrix (GGUF, from `localllm imatrix` or llama-imatrix): quantize "
                        "importance-weighted, as llama-quantize --imatrix (q2_k_s needs one)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_quantize)


def run_quantize(args: argparse.Namespace) -> int:
    quantize_gguf = import_converter().quantize_gguf
    check_type(args.type)
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    result = quantize_gguf(args.input, args.output, args.type,
                           allow_requantize=args.allow_requantize, threads=args.threads,
                           progress=False if args.quiet else None, imatrix=args.imatrix)
    print_result(result, plan=False)
    return 0
