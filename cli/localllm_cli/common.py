"""Options and helpers shared by the commands that load a model."""
from __future__ import annotations

import argparse
import resource
import sys


def add_model_args(p: argparse.ArgumentParser, ctx_default: int = 4096) -> None:
    p.add_argument("-m", "--model", default=None,
                   help="GGUF file or known model name (default: the default model, pulled on first use)")
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument("-c", "--ctx-size", type=int, default=ctx_default, help="context length in tokens")
    add_numerics_arg(p)


def add_numerics_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--numerics", choices=["fast", "llama.cpp"], default="fast",
                   help="float rounding order: fast (default, batch-invariant) or llama.cpp "
                        "(reproduces llama.cpp's CPU logits bit for bit; slower prompts)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--n-predict", type=int, default=256,
                   help="tokens to generate at most (-1: until end of text or context)")
    p.add_argument("--temp", type=float, default=0.8, help="temperature (0 = greedy)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same output)")
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")


def sampling_kwargs(args: argparse.Namespace, n_ctx: int) -> dict:
    return dict(max_tokens=n_ctx if args.n_predict < 0 else args.n_predict,
                temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, penalty_last_n=args.repeat_last_n,
                presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
                seed=args.seed, stop=args.stop or [])


def load_llm(args: argparse.Namespace):
    from localllm import LLM
    return LLM(args.model, n_threads=args.threads, n_ctx=args.ctx_size, numerics=args.numerics)


# Prompt and text files are read whole; anything larger is a mistake (`-f /dev/zero` once ran
# to MemoryError), refused after reading one byte past the bound.
MAX_TEXT_FILE_BYTES = 256 << 20


def read_text_file(path: str) -> str:
    """A UTF-8 text file of at most MAX_TEXT_FILE_BYTES (ValueError naming the file otherwise)."""
    with open(path, "rb") as f:
        data = f.read(MAX_TEXT_FILE_BYTES + 1)
    if len(data) > MAX_TEXT_FILE_BYTES:
        raise ValueError(f"{path}: more than {MAX_TEXT_FILE_BYTES >> 20} MiB; text files are read whole")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux: KiB


def print_stats(llm, timings) -> None:
    print(f"\n[load {timings.load_s * 1000:.0f} ms | prompt {timings.prompt_tokens} tok, "
          f"{timings.prompt_tps:.1f} t/s | generation {timings.generated_tokens} tok, "
          f"{timings.generation_tps:.1f} t/s | peak RSS {peak_rss_mb():.0f} MB | "
          f"{llm.n_threads} threads, {llm.isa}]", file=sys.stderr)
