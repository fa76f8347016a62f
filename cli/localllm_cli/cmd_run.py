"""`localllm run`: complete one prompt, streaming the text to stdout (stats to stderr), or
several prompts as one batch (`-p` repeated, or `-f FILE --lines`), printed in order."""
from __future__ import annotations

import argparse
import sys
import time

from .common import (add_model_args, add_sampling_args, add_spec_args, cache_kwargs, device_kwargs, peak_rss_mb, print_stats,
                     read_text_file, sampling_kwargs, spec_config)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="generate a completion of a prompt (or of several, batched)")
    add_model_args(p)
    add_sampling_args(p)
    add_spec_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", "--prompt", action="append",
                     help="prompt text; repeat to run several prompts as one batch")
    src.add_argument("-f", "--file", help="read the prompt from this file")
    p.add_argument("--lines", action="store_true",
                   help="with -f: one prompt per non-empty line, run as one batch")
    p.add_argument("--chat", action="store_true",
                   help="wrap each prompt as a user message in the model's chat template")
    p.add_argument("--parallel", type=int, default=16, metavar="N",
                   help="most sequences generated at once (default 16)")
    constraint = p.add_mutually_exclusive_group()
    constraint.add_argument("--json-schema", metavar="FILE",
                            help="constrain the output to JSON that this JSON schema (a file) accepts")
    constraint.add_argument("--grammar", metavar="FILE",
                            help="constrain the output to this grammar (a file, GBNF or Lark)")
    kv = p.add_mutually_exclusive_group()
    kv.add_argument("--kv-blocks", type=int, default=None, metavar="N",
                    help="KV cache blocks of 16 tokens shared by all sequences (default: ctx-size tokens)")
    kv.add_argument("--kv-memory", type=float, default=None, metavar="MB",
                    help="KV cache size in MiB (instead of --kv-blocks)")
    p.set_defaults(func=run)


def read_prompts(args: argparse.Namespace) -> list[str]:
    if args.file is None:
        if args.lines:
            raise ValueError("--lines needs -f FILE")
        return list(args.prompt)
    text = read_text_file(args.file)
    if not args.lines:
        return [text]
    prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"{args.file}: no non-empty line")
    return prompts


def load(args: argparse.Namespace):
    from localllm import LLM, hub
    from localllm.engine import kv_bytes_per_token
    from localllm.gguf import GGUFFile
    if args.parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {args.parallel}")
    blocks = args.kv_blocks
    if args.kv_memory is not None:
        path = hub.resolve_model(args.model)
        per_block = 16 * kv_bytes_per_token(GGUFFile(str(path)).metadata, args.cache_type_k, args.cache_type_v)
        blocks = int(args.kv_memory * 2 ** 20 // per_block)
        if blocks < 1:
            raise ValueError(f"--kv-memory {args.kv_memory} MiB holds no KV block ({per_block} bytes each)")
        args.model = str(path)
    return LLM(args.model, n_threads=args.threads, n_ctx=args.ctx_size, max_running=args.parallel,
               kv_blocks=blocks, numerics=args.numerics, speculative=spec_config(args), **device_kwargs(args),
               **cache_kwargs(args))


def make_request(llm, prompt: str, chat: bool, sampling: dict):
    if chat:
        return llm.make_request(messages=[{"role": "user", "content": prompt}], **sampling)
    return llm.make_request(prompt, **sampling)


def run(args: argparse.Namespace) -> int:
    prompts = read_prompts(args)
    llm = load(args)
    kwargs = sampling_kwargs(args, llm.n_ctx)
    if args.json_schema is not None:
        kwargs["json_schema"] = read_text_file(args.json_schema)
    if args.grammar is not None:
        kwargs["grammar"] = read_text_file(args.grammar)
    requests = [make_request(llm, p, args.chat, kwargs) for p in prompts]
    if len(requests) > 1:
        return run_batch(llm, requests)
    stream = llm.stream(requests[0])
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


def run_batch(llm, requests: list) -> int:
    """All prompts run concurrently; each completion is printed, in order, once it is done."""
    t0 = time.perf_counter()
    streams = [llm.stream(r) for r in requests]
    try:
        for i, stream in enumerate(streams):
            text = "".join(stream)        # consuming one stream advances all of them
            print(f"--- [{i + 1}/{len(streams)}] ({stream.finish_reason}) ---")
            print(text, flush=True)
    except KeyboardInterrupt:
        for stream in streams:
            stream.close()
        return 130
    wall = time.perf_counter() - t0
    n_prompt = sum(len(r.prompt_ids) for r in requests)
    n_gen = sum(len(s.token_ids) for s in streams)
    state = llm.engine.pool_state()
    print(f"\n[batch of {len(requests)} | prompt {n_prompt} tok | generation {n_gen} tok | {wall:.2f} s, "
          f"{n_gen / wall:.1f} t/s aggregate | peak KV {state['peak_used']} of {state['blocks']} blocks "
          f"({state['peak_kv_bytes'] / 2 ** 20:.1f} MiB) | prefix cache hits {state['hit_tokens']} tok | "
          f"preemptions {llm.engine.stats.preemptions}{batch_spec_stats(llm.engine.stats)} | "
          f"peak RSS {peak_rss_mb():.0f} MB | "
          f"{llm.n_threads} threads, {llm.isa}]", file=sys.stderr)
    return 0


def batch_spec_stats(stats) -> str:
    if not stats.spec_drafted:
        return ""
    return (f" | draft {stats.spec_drafted} tok, {stats.spec_accepted} accepted "
            f"({100 * stats.acceptance_rate:.0f}%, {stats.mean_accepted:.2f} per verification)")
