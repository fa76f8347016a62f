"""`localllm embed`: print the embeddings of texts as JSON (one object per text), or with
--query the rerank scores of the texts as documents for that query."""
from __future__ import annotations

import argparse
import json

from .common import add_model_args, load_llm


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("embed", help="print the embedding of each TEXT (or, with --query, rerank scores) as JSON")
    p.add_argument("texts", nargs="+", metavar="TEXT")
    add_model_args(p)
    p.add_argument("--pooling", choices=["mean", "cls", "last"], default=None,
                   help="pooling instead of the model's own (its GGUF's pooling_type)")
    p.add_argument("--dimensions", type=int, default=None, metavar="D",
                   help="keep the first D components (Matryoshka), renormalized")
    p.add_argument("--no-normalize", action="store_true", help="do not L2-normalize the vectors")
    p.add_argument("--truncate", action="store_true", help="cut texts longer than the model takes")
    p.add_argument("--query", default=None,
                   help="rerank: score each TEXT as a document for this query (a reranker model)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    llm = load_llm(args)
    if args.query is not None:
        results = llm.rerank(args.query, args.texts, truncate=args.truncate)
        print(json.dumps({"query": args.query, "results": results}))
        return 0
    vectors = llm.embed(args.texts, normalize=not args.no_normalize, dimensions=args.dimensions,
                        pooling=args.pooling, truncate=args.truncate)
    print(json.dumps([{"index": i, "text": t, "embedding": v.tolist()}
                      for i, (t, v) in enumerate(zip(args.texts, vectors))]))
    return 0
