"""`localllm serve`: an OpenAI-compatible server on 127.0.0.1:8080 (see README, "Server")."""
from __future__ import annotations

import argparse
import logging
import sys

from .common import add_model_args, add_spec_args, parse_size, spec_config

# LLM's context when none is given (-c absent): the KV pool and the request limits need it
# before the model loads.
DEFAULT_CTX = 4096


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the OpenAI API (chat/completions, completions, ...) over HTTP")
    add_model_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (not on /health, /metrics)")
    p.add_argument("--parallel", type=int, default=16, metavar="N",
                   help="most sequences generated at once (default 16)")
    p.add_argument("--kv-memory", type=parse_size, default=None, metavar="SIZE",
                   help="KV cache shared by all requests, e.g. 512M or 2G (K/M/G/T are powers of 1024, a bare "
                        "number is bytes; default: parallel x 1024 tokens, at least one context)")
    p.add_argument("--max-queue", type=int, default=256, metavar="N",
                   help="requests that may wait beyond the running ones before 429 (default 256)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    add_spec_args(p)
    p.set_defaults(func=run)



def kv_blocks(args: argparse.Namespace, model_path: str, n_ctx: int) -> int:
    """The pool's blocks: --kv-memory's worth, or parallel x 1024 tokens (at least one context)."""
    from localllm.engine import kv_bytes_per_token
    from localllm.gguf import GGUFFile
    block_tokens = 16
    if args.kv_memory is None:
        return -(-max(args.parallel * 1024, n_ctx) // block_tokens)
    per_block = block_tokens * kv_bytes_per_token(GGUFFile(model_path).metadata, args.cache_type_k,
                                                  args.cache_type_v)
    blocks = args.kv_memory // per_block
    if blocks * block_tokens < n_ctx:
        raise ValueError(f"--kv-memory ({args.kv_memory} bytes) holds {blocks * block_tokens} tokens, less than "
                         f"one context ({n_ctx} tokens); raise it or lower -c")
    return blocks


def run(args: argparse.Namespace) -> int:
    from localllm import hub
    from localllm.server import ServerConfig, serve_forever
    n_ctx = args.ctx_size if args.ctx_size is not None else DEFAULT_CTX
    for name in ("parallel", "ctx_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if args.numerics != "fast":
        raise ValueError("serve runs the fast numerics only (batch-invariant); drop --numerics")
    model = str(hub.resolve_model(args.model))       # a bad path fails now, not after startup
    config = ServerConfig(model=model, n_ctx=n_ctx, threads=args.threads, parallel=args.parallel,
                          kv_blocks=kv_blocks(args, model, n_ctx), max_queue=args.max_queue, api_key=args.api_key,
                          speculative=spec_config(args), cache_type_k=args.cache_type_k,
                          cache_type_v=args.cache_type_v)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    serve_forever(config, args.host, args.port, args.log_level)
    return 0
