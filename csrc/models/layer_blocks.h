// layer_blocks.h — building blocks the architecture files compose, on a layer's backend: the attention
// block (projections, norms, RoPE, KV write, attention, output projection) and the FFN block.
#pragma once
#include <stdint.h>
#include <string>
#include "model/model.h"

namespace lll {

// out[T, n_embd] = attention sub-layer of layer c.il on the normalized input h[T, n_embd].
void attention_block(const LayerCtx& c, const float* h, int64_t T, float* out);

// out[T, n_embd] = down(act(gate(h)) * up(h))
void ffn_block(const LayerCtx& c, const float* h, int64_t T, float* out, FFNAct act);

// out[T, n_embd] = the mixture of experts (moe_block.cpp) on h: each token's top n_expert_used
// experts' SwiGLU FFNs, weighted by the router.
void moe_ffn_block(const LayerCtx& c, const float* h, int64_t T, float* out);

// Hyper-parameters every llama-like architecture shares, read from "{arch}.*" keys.
void load_common_hparams(const GGUFFile& f, HParams& hp);

}  // namespace lll
