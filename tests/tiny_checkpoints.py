"""Small random-weight checkpoints of each architecture, built by transformers with a fixed seed
and a real tokenizer beside them (how to test an architecture without its downloadable weights),
and transformers' fp32 logits on them. Shared by test_rope_scaling.py, test_archs.py and
benchmarks/arch_crosscheck.py (which holds the same checkpoints to llama.cpp)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from test_convert import checkpoint

ORIG_CTX = 64          # the checkpoints' original context; the tests run 3x past it
N_TOKENS = 192
TOL = 3e-3             # max relative logit error on every position (F16 KV ~1e-3)

LLAMA = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=49152, max_position_embeddings=4 * ORIG_CTX,
             rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
QWEN2 = dict(LLAMA, vocab_size=151936, bos_token_id=151643, eos_token_id=151645)
QWEN3 = dict(QWEN2, head_dim=64)     # Q is 4 x 64 = 256 wide on a 128-wide model, as Qwen3's are
# 8 experts of width 64, 2 per token, weights renormalized (as Qwen3-30B-A3B's config has it).
QWEN3MOE = dict(QWEN3, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True)
PHI3 = dict(LLAMA, tie_word_embeddings=False, pad_token_id=0)
# Gemma 2 with a 16-token window (alternate layers) and strong soft-capping, so both matter over
# 192 tokens; Gemma 3's tokenizer (vocabulary 262144).
GEMMA2 = dict(LLAMA, num_hidden_layers=4, vocab_size=262144, head_dim=32, query_pre_attn_scalar=32,
              sliding_window=16, attn_logit_softcapping=2.0, final_logit_softcapping=3.0, bos_token_id=2,
              eos_token_id=1, pad_token_id=0)

# name -> (model family, rope_parameters)
VARIANTS = {
    "llama3": ("llama", {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": ORIG_CTX}),
    "linear": ("llama", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
    "yarn-llama": ("llama", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": ORIG_CTX}),
    "yarn-qwen2": ("qwen2", {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                             "original_max_position_embeddings": ORIG_CTX}),
    "yarn-qwen3": ("qwen3", {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                             "original_max_position_embeddings": ORIG_CTX}),
    # Phi-3 128k's LongRoPE: per-pair divisors, long ones past the original context, short ones
    # within it; 16 pairs of the 32-dim heads.
    "longrope-phi3": ("phi3", {"rope_type": "longrope", "rope_theta": 10000.0,
                               "long_factor": [float(x) for x in np.linspace(1.0, 6.0, 16)],
                               "short_factor": [float(x) for x in np.linspace(1.0, 1.6, 16)],
                               "original_max_position_embeddings": ORIG_CTX}),
}


def build(family: str, rope: dict | None, out: Path) -> Path:
    """A random F32 checkpoint of ``family`` (seed 0: the same weights with and without a RoPE
    scaling), with the tokenizer files of one of our real models."""
    import transformers as tf
    cfg_cls, model_cls, base, tok_from = {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, LLAMA, "smollm2"),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM, QWEN2, "qwen2"),
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM, QWEN3, "qwen2"),
        "qwen3moe": (tf.Qwen3MoeConfig, tf.Qwen3MoeForCausalLM, QWEN3MOE, "qwen2"),
        "phi3": (tf.Phi3Config, tf.Phi3ForCausalLM, PHI3, "smollm2"),
        "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM, GEMMA2, "gemma3")}[family]
    params = rope or {"rope_type": "default", "rope_theta": 1e6 if family.startswith("qwen") else 10000.0}
    torch.manual_seed(0)
    extra = {"original_max_position_embeddings": ORIG_CTX} if params.get("rope_type") == "longrope" else {}
    config = cfg_cls(**base, **extra, rope_parameters=dict(params))
    config.initializer_range = 0.08     # peaked next-token distributions, as in test_convert
    model_cls(config).save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
        if (checkpoint(tok_from) / f).exists():
            shutil.copy(checkpoint(tok_from) / f, out / f)
    return out


def hf_logits(path: Path, ids: list[int]) -> np.ndarray:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def row_rel_err(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(x - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
