"""`localllm run`: complete a prompt, streaming the text to stdout (stats to stderr)."""
from __future__ import annotations

import argparse
import sys

from .common import add_model_args, add_sampling_args, load_llm, print_stats, sampling_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="generate a completion of a prompt")
    add_model_args(p)
    add_sampling_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", "--prompt", help="prompt text")
    src.add_argument("-f", "--file", help="read the prompt from this file")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt as a user message in the model's chat template")
    p.set_defaults(func=run)


def read_prompt(args: argparse.Namespace) -> str:
    if args.file is None:
        return args.prompt
    with open(args.file, encoding="utf-8") as f:
        return f.read()


def run(args: argparse.Namespace) -> int:
    llm = load_llm(args)
    prompt = read_prompt(args)
    if args.chat:
        prompt = llm.render_chat([{"role": "user", "content": prompt}])
    ids = llm.tokenize(prompt, add_special=True, parse_special=True)
    if args.chat and llm.tokenizer.bos_token and prompt.startswith(llm.tokenizer.bos_token):
        ids = llm.tokenize(prompt, add_special=False, parse_special=True)
    stream = llm.stream(ids, **sampling_kwargs(args, llm.n_ctx))
    try:
        for piece in stream:
            sys.stdout.write(piece)
            sys.stdout.flush()
    except KeyboardInterrupt:
        stream.close()
        sys.stdout.write("\n")
        print_stats(llm, stream.timings)
        return 130
    sys.stdout.write("\n")
    print_stats(llm, stream.timings)
    return 0
