"""`localllm bench`: prompt-processing and generation speed, measured like llama-bench."""
from __future__ import annotations

import argparse
import json
import os

from localllm import hub

from .common import add_cache_type_args, add_device_args, add_numerics_arg, cache_kwargs, device_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure pp/tg tokens per second (llama-bench's method)")
    p.add_argument("-m", "--model", action="append", default=None,
                   help="GGUF file or known model name (repeatable; default: the default model)")
    p.add_argument("-p", "--n-prompt", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("-r", "--repetitions", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print llama-bench-style JSON")
    add_numerics_arg(p)
    add_device_args(p)
    add_cache_type_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm import LLM
    from localllm.bench import run_bench
    if args.repetitions < 1 or args.n_prompt < 0 or args.n_gen < 0:
        raise ValueError("-r must be >= 1 and -p/-n >= 0")
    rows = []
    for model in args.model or [None]:
        path = hub.resolve_model(model)
        llm = LLM(str(path), n_threads=args.threads, n_ctx=max(args.n_prompt, args.n_gen, 16) + 16,
                  n_batch=max(args.n_prompt, 1), numerics=args.numerics, **device_kwargs(args),
                  **cache_kwargs(args))
        n_params = sum(t.n_elements for t in llm.gguf.tensors)
        for r in run_bench(llm, args.n_prompt, args.n_gen, args.repetitions):
            rows.append({
                "model_filename": str(path), "model_type": llm.hparams["arch"],
                "model_size": os.path.getsize(path), "model_n_params": n_params,
                "n_threads": llm.n_threads, "type_k": llm.cache_types[0], "type_v": llm.cache_types[1],
                "n_prompt": r.n_prompt, "n_gen": r.n_gen,
                "test": r.test, "avg_ns": r.avg_ns, "stddev_ns": int(_stdev(r.samples_ns)),
                "avg_ts": r.avg_ts, "stddev_ts": r.stddev_ts, "samples_ns": r.samples_ns,
                "samples_ts": r.samples_ts, "n_gpu_layers": llm.n_gpu_layers,
                "backend": (f"{llm._model.output_device} + CPU ({llm.isa})" if llm.n_gpu_layers
                            else f"CPU ({llm.isa})"),
            })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| model | size | params | threads | test | t/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {os.path.basename(r['model_filename'])} | {r['model_size'] / 2**20:.2f} MiB | "
              f"{r['model_n_params'] / 1e6:.2f} M | {r['n_threads']} | {r['test']} | "
              f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} |")
    return 0


def _stdev(xs) -> float:
    import statistics
    return statistics.stdev(xs) if len(xs) > 1 else 0.0
