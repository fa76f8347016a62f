"""`localllm pull NAME` and `localllm list`: the model cache."""
from __future__ import annotations

import argparse

from localllm import hub


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pull", help="download a known model into the cache (sha256-verified)")
    p.add_argument("name", nargs="?", default=hub.DEFAULT_MODEL,
                   help=f"model name (default {hub.DEFAULT_MODEL}); one of: {', '.join(hub.KNOWN_MODELS)}")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_pull)
    p = sub.add_parser("list", help="list known models and which are cached")
    p.set_defaults(func=run_list)


def run_pull(args: argparse.Namespace) -> int:
    path = hub.pull(args.name, quiet=args.quiet)
    print(path)
    return 0


def run_list(args: argparse.Namespace) -> int:
    cached = {name: (path, size) for name, path, size in hub.list_cached()}
    print(f"{'NAME':28} {'SIZE':>10}  {'CACHED':6}  DESCRIPTION")
    for name, m in hub.KNOWN_MODELS.items():
        mark = "yes" if name in cached else "no"
        default = " (default)" if name == hub.DEFAULT_MODEL else ""
        print(f"{name:28} {m.size / 1e6:8.1f}MB  {mark:6}  {m.description}{default}")
    print(f"cache: {hub.cache_dir()}")
    return 0
