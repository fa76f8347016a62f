"""`localllm` entry point: one sub-command per module in this package (cmd_*.py)."""
from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines register(subparsers) which adds its parser and sets func=run(args) -> int.
COMMAND_MODULES = ["cmd_pull", "cmd_info", "cmd_run", "cmd_chat", "cmd_tokenize", "cmd_embed", "cmd_perplexity", "cmd_bench",
                   "cmd_convert", "cmd_quantize", "cmd_imatrix", "cmd_serve"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="localllm", description="Run GGUF language models locally.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"localllm_cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError) as e:
        print(f"localllm {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
