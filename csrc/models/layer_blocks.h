// layer_blocks.h — building blocks the architecture files compose, on a layer's backend: the attention
// block (projections, norms, RoPE, KV write, attention, output projection) and the FFN block.
#pragma once
#include <stdint.h>
#include <string>
#include "../model.h"

namespace lll {

// out[T, n_embd] = attention sub-layer of layer c.il on the normalized input h[T, n_embd].
void attention_block(const LayerCtx& c, const float* h, int64_t T, float* out);

// out[T, n_embd] = down(act(gate(h)) * up(h))
void ffn_block(const LayerCtx& c, const float* h, int64_t T, float* out, FFNAct act);

// Hyper-parameters every llama-like architecture shares, read from "{arch}.*" keys.
void load_common_hparams(const GGUFFile& f, HParams& hp);

}  // namespace lll
