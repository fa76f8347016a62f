"""`localllm tokenize`: print the token ids of a text as a JSON list."""
from __future__ import annotations

import argparse
import json

from localllm import hub


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tokenize", help="print the token ids of TEXT as JSON")
    p.add_argument("text")
    p.add_argument("-m", "--model", default=None, help="GGUF file or known model name")
    p.add_argument("--no-special", action="store_true", help="do not add BOS/EOS")
    p.add_argument("--parse-special", action="store_true",
                   help="turn special-token text such as <|im_start|> into the special token")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.gguf import GGUFFile
    from localllm.text.tokenizer import Tokenizer
    path = hub.resolve_model(args.model)
    tok = Tokenizer.from_gguf_metadata(GGUFFile(str(path)).metadata)
    ids = tok.encode(args.text, add_special=not args.no_special, parse_special=args.parse_special)
    print(json.dumps(ids))
    return 0
