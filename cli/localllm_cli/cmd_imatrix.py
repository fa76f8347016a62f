"""`localllm imatrix -m MODEL -f CALIB.txt -o imatrix.gguf`: an importance matrix, as llama-imatrix makes it."""
from __future__ import annotations

import argparse
import sys

from .common import add_numerics_arg, read_text_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("imatrix", help="importance matrix of a model over a calibration text "
                                       "(llama-imatrix's method and GGUF file format), for quantize --imatrix")
    p.add_argument("-m", "--model", default=None,
                   help="GGUF file or known model name (default: the default model, pulled on first use)")
    p.add_argument("-f", "--file", required=True, help="calibration text file")
    p.add_argument("-o", "--output", default="imatrix.gguf", help="output file (default imatrix.gguf)")
    p.add_argument("-c", "--ctx-size", type=int, default=512, help="chunk size in tokens (default 512)")
    p.add_argument("--chunks", type=int, default=None, help="process at most this many chunks")
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_numerics_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from localllm import LLM
    from localllm.imatrix import collect_imatrix, describe, save_imatrix
    text = read_text_file(args.file)
    llm = LLM(args.model, n_threads=args.threads, n_ctx=args.ctx_size, numerics=args.numerics, device="cpu")
    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="chunk", desc="imatrix", file=sys.stderr)
        bar.update(done - bar.n)

    im = collect_imatrix(llm, text, args.ctx_size, max_chunks=args.chunks, dataset=args.file,
                         progress=None if args.quiet else progress)
    if bar is not None:
        bar.close()
    save_imatrix(args.output, im)
    print(f"wrote {args.output}: {describe(im)}")
    return 0
