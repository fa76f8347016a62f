"""`localllm chat`: an interactive multi-turn conversation using the model's chat template."""
from __future__ import annotations

import argparse
import sys

from .common import add_model_args, add_sampling_args, load_llm, print_stats, sampling_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="interactive chat (type /exit or Ctrl-D to leave, /reset to forget)")
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("-s", "--system", default=None, help="system prompt")
    p.add_argument("--stats", action="store_true", help="print speed after each reply")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    llm = load_llm(args)
    base = [{"role": "system", "content": args.system}] if args.system else []
    history = list(base)
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            return 0
        text = line.rstrip("\n")
        if text.strip() in ("/exit", "/quit"):
            return 0
        if text.strip() == "/reset":
            history = list(base)
            continue
        if not text.strip():
            continue
        history.append({"role": "user", "content": text})
        stream = llm.stream(llm.make_request(messages=history, **sampling_kwargs(args, llm.n_ctx)))
        pieces = []
        try:
            for piece in stream:
                pieces.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            stream.close()            # Ctrl-C ends this reply, not the session
        sys.stdout.write("\n")
        sys.stdout.flush()
        history.append({"role": "assistant", "content": "".join(pieces)})
        if args.stats:
            print_stats(llm, stream.timings)
