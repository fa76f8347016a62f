"""Options and helpers shared by the commands that load a model."""
from __future__ import annotations

import argparse
import resource
import sys


def add_model_args(p: argparse.ArgumentParser, ctx_default: int | None = None) -> None:
    """ctx_default None: the library's default context (4096), which -ngl auto may shrink to fit
    the GPU; a context given with -c is never shrunk."""
    p.add_argument("-m", "--model", default=None,
                   help="GGUF file or known model name (default: the default model, pulled on first use)")
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument("-c", "--ctx-size", type=int, default=ctx_default,
                   help=f"context length in tokens (default {ctx_default or 4096})")
    add_numerics_arg(p)
    add_device_args(p)
    add_cache_type_args(p)


def add_cache_type_args(p: argparse.ArgumentParser) -> None:
    """llama.cpp's KV cache type flags."""
    for short, name in (("-ctk", "k"), ("-ctv", "v")):
        p.add_argument(short, f"--cache-type-{name}", dest=f"cache_type_{name}", default="f16",
                       type=str.lower, choices=["f16", "q8_0", "q4_0"],
                       help=f"KV cache type for {'K' if name == 'k' else 'V'}: f16 (default), q8_0 (about half "
                            f"the memory) or q4_0 (about a quarter); quantized types run on the CPU and on "
                            f"Vulkan layers, not on CUDA's")


def cache_kwargs(args: argparse.Namespace) -> dict:
    return {"cache_type_k": args.cache_type_k, "cache_type_v": args.cache_type_v}


def parse_size(text: str) -> int:
    """Bytes from '1073741824', '512M', '1G', '1.5GiB' (K/M/G/T are powers of 1024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = 1
    if t and t[-1] in "KMGT":
        scale = 1 << (10 * ("KMGT".index(t[-1]) + 1))
        t = t[:-1]
    try:
        value = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1G, 512M, 1073741824)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a size must be >= 0, got {text!r}")
    return int(value * scale)


def add_device_args(p: argparse.ArgumentParser) -> None:
    from localllm.llm import DEVICES, device_spec   # the device names LLM(device=) takes, in one place

    def device_name(value: str) -> str:
        try:
            device_spec(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value

    p.add_argument("-ngl", "--n-gpu-layers", default=None, metavar="N|all|auto",
                   help="layers on the GPU, as llama.cpp's -ngl: the last N layers plus the output "
                        "head (default auto: as many as fit; 0 without a GPU)")
    p.add_argument("--device", type=device_name, default="auto", metavar="|".join(DEVICES) + "[:N]",
                   help="cpu: run on the CPU only (same as -ngl 0); auto (default): -ngl layers on a "
                        "CUDA device, else a Vulkan GPU; cuda, vulkan: -ngl layers on that backend's "
                        "default device (vulkan includes a CPU implementation such as lavapipe); "
                        "cuda:N, vulkan:N: on device N of `localllm info --devices`")
    p.add_argument("--gpu-margin", type=parse_size, default=None, metavar="SIZE",
                   help="GPU memory auto leaves free (default 1G)")


def device_kwargs(args: argparse.Namespace) -> dict:
    """LLM's n_gpu_layers and gpu_margin from -ngl, --device and --gpu-margin."""
    from localllm.plan import DEFAULT_GPU_MARGIN, parse_n_gpu_layers
    ngl = parse_n_gpu_layers(args.n_gpu_layers)
    if args.device == "cpu":
        if ngl not in ("auto", 0):
            raise ValueError(f"--device cpu contradicts -ngl {args.n_gpu_layers}")
        ngl = 0
    margin = DEFAULT_GPU_MARGIN if args.gpu_margin is None else args.gpu_margin
    return {"n_gpu_layers": ngl, "gpu_margin": margin, "device": args.device}


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
    return LLM(args.model, n_threads=args.threads, n_ctx=args.ctx_size, numerics=args.numerics,
               **device_kwargs(args), **cache_kwargs(args))


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """Speculative decoding options; names as llama.cpp's (llama-server, llama-speculative)."""
    g = p.add_argument_group("speculative decoding (greedy output stays exactly plain decoding's)")
    g.add_argument("-md", "--draft-model", "--model-draft", dest="draft_model", default=None, metavar="FILE",
                   help="draft model (GGUF) with this model's vocabulary: it proposes tokens, the model verifies them")
    g.add_argument("--spec", choices=["ngram"], default=None,
                   help="ngram: n-gram prompt lookup, proposes what followed the last earlier occurrence "
                        "of the text's final n-gram (no second model)")
    g.add_argument("--draft-max", "--draft", "--draft-n", dest="draft_max", type=int, default=16, metavar="N",
                   help="most tokens drafted per step (default 16)")
    g.add_argument("--draft-min", type=int, default=0, metavar="N",
                   help="do not verify drafts shorter than this (default 0)")
    g.add_argument("--draft-p-min", type=float, default=0.75, metavar="P",
                   help="the draft model stops drafting when its top probability is below P (default 0.75)")
    g.add_argument("--spec-ngram-min", type=int, default=2, metavar="N",
                   help="shortest n-gram n-gram lookup matches (default 2)")
    g.add_argument("--spec-ngram-max", type=int, default=4, metavar="N",
                   help="longest n-gram n-gram lookup matches, tried first (default 4)")


def spec_config(args: argparse.Namespace):
    """The SpecConfig the options ask for, or None (no speculation)."""
    from localllm import SpecConfig
    if args.draft_model is not None and args.spec is not None:
        raise ValueError("--spec ngram and --draft-model are two proposers: choose one")
    if args.draft_model is None and args.spec is None:
        return None
    config = SpecConfig(mode="draft" if args.draft_model else "ngram", draft_model=args.draft_model,
                        draft_max=args.draft_max, draft_min=args.draft_min, draft_p_min=args.draft_p_min,
                        ngram_min=args.spec_ngram_min, ngram_max=args.spec_ngram_max)
    config.validate()
    return config


def spec_stats(timings) -> str:
    """' | draft N tok, M accepted (x%)' when the generation speculated."""
    if not timings.draft_tokens:
        return ""
    return (f" | draft {timings.draft_tokens} tok, {timings.accepted_tokens} accepted "
            f"({100 * timings.acceptance_rate:.0f}%)")


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
          f"{timings.generation_tps:.1f} t/s{spec_stats(timings)} | peak RSS {peak_rss_mb():.0f} MB | "
          f"{llm.n_threads} threads, {llm.isa}]", file=sys.stderr)
