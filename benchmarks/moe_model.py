#!/usr/bin/env python3
"""A mid-sized random-weight Qwen3-MoE for speed comparisons (no Qwen3-MoE weights can be
downloaded here): Qwen3-30B-A3B's proportions at a smaller width — 6 layers, n_embd 768,
16 query / 4 KV heads of 64, 64 experts of width 256 with 8 per token — built by transformers
(seed 0, Qwen2.5's tokenizer), converted by `localllm convert` to the preset asked, and cached
in ~/.cache/localllm/derived. Prints the file's path; then

    python benchmarks/compare_llamacpp.py -m "$(python benchmarks/moe_model.py)"

times localllm against llama.cpp on it. Needs the test extras (torch, transformers).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "convert"))

DERIVED = Path(os.path.expanduser("~/.cache/localllm/derived"))
SHAPE = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=6, num_attention_heads=16,
             num_key_value_heads=4, head_dim=64, moe_intermediate_size=256, num_experts=64,
             num_experts_per_tok=8, norm_topk_prob=True, vocab_size=151936, max_position_embeddings=4096,
             rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
             rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def build(preset: str) -> Path:
    out = DERIVED / f"qwen3moe-bench-6x768-64e8.{preset}.gguf"
    if out.exists():
        return out
    import torch
    import transformers as tf
    from localllm_convert import convert
    from test_convert import checkpoint
    DERIVED.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "qwen3moe-bench"
        torch.manual_seed(0)
        config = tf.Qwen3MoeConfig(**SHAPE)
        config.initializer_range = 0.05
        tf.Qwen3MoeForCausalLM(config).save_pretrained(src)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(checkpoint("qwen2") / f, src / f)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        convert(src, tmp, type=preset, progress=False)
        os.replace(tmp, out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--type", default="q4_k_m", help="converter preset (default q4_k_m)")
    print(build(ap.parse_args().type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
