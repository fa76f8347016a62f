"""`localllm convert HF_DIR -o OUT.gguf [--type ...]`: Hugging Face checkpoint -> GGUF."""
from __future__ import annotations

import argparse
import sys

__all__ = ["register", "run_convert", "print_result", "import_converter"]

# The converter's packages (gguf, safetensors) come with the `convert` extra, so this module
# imports the converter only when a conversion runs: every other command works without them.
_TYPES_HELP = ("output type: f32, f16 (default), bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q2_k_s, "
               "q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs, iq2_xxs, "
               "iq2_xs, iq2_s, iq2_m, iq3_xxs, iq3_xs, iq3_s, iq3_m; the K-quant and IQ presets mix "
               "types per tensor as llama.cpp does (q2_k_s, iq2_*, iq3_xxs and iq3_xs need an "
               "importance matrix: --imatrix). Default for a GPTQ/AWQ checkpoint: its layers keep "
               "their quantization (exactly where a ggml type holds it), the rest f16")


def import_converter():
    """The localllm_convert package, or a clear error naming the extra that brings its packages."""
    try:
        import gguf  # noqa: F401  (the convert extra's packages, named in the error below)
        import safetensors  # noqa: F401
        import localllm_convert
    except ModuleNotFoundError as e:
        raise RuntimeError(f"the converter needs the package {e.name!r}: "
                           f"pip install 'localllm[convert]'") from None
    return localllm_convert


def check_type(name: str) -> str:
    """The preset name, checked against the converter's presets."""
    return import_converter().filetypes.preset(name).name


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a Hugging Face checkpoint to GGUF (quantizing "
                                       "in the same pass)")
    p.add_argument("hf_dir", help="checkpoint directory (config.json, *.safetensors, tokenizer)")
    p.add_argument("-o", "--outfile", default=None, help="output .gguf file")
    p.add_argument("--type", "--outtype", dest="type", default=None, type=str.lower,
                   help=_TYPES_HELP)
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all)")
    p.add_argument("--vocab-only", action="store_true", help="write only metadata and vocabulary")
    p.add_argument("--dry-run", action="store_true",
                   help="check the checkpoint and print the plan (tensor types, sizes); write nothing")
    p.add_argument("--imatrix", default=None, metavar="FILE",
                   help="importance matrix (GGUF, from `localllm imatrix` or llama-imatrix): quantize "
                        "importance-weighted, as llama-quantize --imatrix (q2_k_s needs one)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_convert)


def print_result(result, plan: bool, out=None) -> None:
    """Print a conversion result: the per-tensor plan (when asked) and the summary."""
    out = out if out is not None else sys.stdout
    if plan:
        for t in result.tensors:
            note = f"  (fallback from {t.fallback_from.name})" if t.fallback_from else ""
            if t.exact is not None:
                note += "  (exact)" if t.exact else "  (requantized)"
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
    if result.packed_format:
        exact, total = result.exact_count
        print(f"{result.packed_format}: {exact} of {total} quantized layers stored exactly",
              file=out)


def run_convert(args: argparse.Namespace) -> int:
    convert = import_converter().convert
    if args.type is not None:
        check_type(args.type)
    if args.outfile is None and not args.dry_run:
        raise ValueError("an output file is needed: -o OUT.gguf")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    result = convert(args.hf_dir, args.outfile, type=args.type, threads=args.threads,
                     vocab_only=args.vocab_only, dry_run=args.dry_run,
                     progress=False if args.quiet else None, imatrix=args.imatrix)
    print_result(result, plan=args.dry_run)
    return 0
