"""`localllm perplexity`: llama.cpp's perplexity method on a text file."""
from __future__ import annotations

import argparse
import sys

from .common import add_model_args, load_llm, read_text_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perplexity", help="perplexity of a text file (llama.cpp's method)")
    add_model_args(p, ctx_default=512)
    p.add_argument("-f", "--file", required=True, help="text file")
    p.add_argument("--chunks", type=int, default=None, help="score at most this many chunks")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.perplexity import perplexity
    text = read_text_file(args.file)
    llm = load_llm(args)

    def progress(done: int, total: int, ppl: float) -> None:
        print(f"[{done}/{total}] {ppl:.4f}", file=sys.stderr, flush=True)

    res = perplexity(llm, text, args.ctx_size, max_chunks=args.chunks, progress=progress)
    print(f"PPL = {res.ppl:.4f} +/- {res.stderr:.5f}")
    print(f"chunks {res.n_chunks}, scored tokens {res.n_scored}, n_ctx {args.ctx_size}", file=sys.stderr)
    return 0
