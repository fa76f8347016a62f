"""`localllm serve`: an OpenAI-compatible server on 127.0.0.1:8080 (see README, "Server")."""
from __future__ import annotations

import argparse
import logging
import sys

from .common import add_model_args, add_spec_args, device_kwargs, parse_size, spec_config

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
    add_limit_args(p)
    add_spec_args(p)
    p.set_defaults(func=run)


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_limit_args(p: argparse.ArgumentParser) -> None:
    """Bounds on what a client may send and hold (docs/server.md, "Limits")."""
    g = p.add_argument_group("limits (what one client may send and hold)")
    g.add_argument("--max-body", type=parse_size, default=8 * 2**20, metavar="SIZE",
                   help="largest request body; 413 beyond (default 8M)")
    g.add_argument("--max-prompt-chars", type=int, default=None, metavar="N",
                   help="characters of prompt or messages a request may send, checked before tokenizing "
                        "(default 16 x the context)")
    g.add_argument("--max-stop", type=int, default=16, metavar="N", help="stop strings per request (default 16)")
    g.add_argument("--max-stop-chars", type=int, default=256, metavar="N",
                   help="characters per stop string (default 256)")
    g.add_argument("--max-logit-bias", type=int, default=300, metavar="N",
                   help="logit_bias entries per request (default 300)")
    g.add_argument("--max-connections", type=int, default=512, metavar="N",
                   help="open connections; requests on more get 503 (default 512)")
    g.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to send a request's headers, from connecting or the previous answer (default 10)")
    g.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                   help="seconds to send a request's body after its headers; 408 beyond (default 30)")
    g.add_argument("--keep-alive-timeout", type=float, default=5.0, metavar="S",
                   help="seconds an idle connection stays open between requests (default 5)")
    g.add_argument("--queue-timeout", type=float, default=120.0, metavar="S",
                   help="seconds a request may wait to start generating; 503 beyond (default 120)")
    g.add_argument("--shutdown-grace", type=float, default=10.0, metavar="S",
                   help="on SIGINT/SIGTERM, seconds running requests get to finish (default 10)")
    g.add_argument("--chat-parse-special", action="store_true",
                   help="read control-token texts (<|im_start|>...) inside chat messages as tokens "
                        "(default: text, so a message cannot forge a turn)")
    g.add_argument("--allowed-hosts", type=_names, default=(), metavar="LIST",
                   help="comma-separated Host names to answer besides this server's own addresses "
                        "(127.0.0.1, localhost, [::1], --host), e.g. myserver.lan; * for any")
    g.add_argument("--allowed-origins", type=_names, default=(), metavar="LIST",
                   help="comma-separated browser origins allowed to call the API, with CORS, e.g. "
                        "http://localhost:3000; * for any (default: none, CORS off)")


def _check_limits(args: argparse.Namespace) -> None:
    for name in ("max_stop", "max_stop_chars", "max_logit_bias", "max_connections", "max_body"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_prompt_chars is not None and args.max_prompt_chars < 1:
        raise ValueError(f"--max-prompt-chars must be >= 1, got {args.max_prompt_chars}")
    for name in ("header_timeout", "body_timeout", "keep_alive_timeout", "queue_timeout"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.shutdown_grace < 0:
        raise ValueError(f"--shutdown-grace must be >= 0, got {args.shutdown_grace}")



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
    from localllm.server import ConnectionLimits, RequestLimits, ServerConfig, serve_forever
    n_ctx = args.ctx_size if args.ctx_size is not None else DEFAULT_CTX
    for name in ("parallel", "ctx_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    _check_limits(args)
    if args.numerics != "fast":
        raise ValueError("serve runs the fast numerics only (batch-invariant); drop --numerics")
    model = str(hub.resolve_model(args.model))       # a bad path fails now, not after startup
    config = ServerConfig(model=model, n_ctx=n_ctx, threads=args.threads, parallel=args.parallel,
                          kv_blocks=kv_blocks(args, model, n_ctx), max_queue=args.max_queue, api_key=args.api_key,
                          speculative=spec_config(args), cache_type_k=args.cache_type_k,
                          cache_type_v=args.cache_type_v, **device_kwargs(args),
                          limits=RequestLimits(max_body_bytes=args.max_body, max_prompt_chars=args.max_prompt_chars,
                                               max_stop=args.max_stop, max_stop_chars=args.max_stop_chars,
                                               max_logit_bias=args.max_logit_bias),
                          connections=ConnectionLimits(header_timeout=args.header_timeout,
                                                       body_timeout=args.body_timeout,
                                                       keep_alive_timeout=args.keep_alive_timeout,
                                                       max_connections=args.max_connections),
                          queue_timeout=args.queue_timeout, shutdown_grace=args.shutdown_grace,
                          chat_parse_special=args.chat_parse_special, host=args.host,
                          allowed_hosts=args.allowed_hosts, allowed_origins=args.allowed_origins)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    serve_forever(config, args.host, args.port, args.log_level)
    return 0
