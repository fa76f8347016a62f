// llama.h — the llama block, reused by architectures that differ only in their hyper-parameters.
#pragma once
#include <string>
#include "model/model.h"

namespace lll {
// out[T, n_embd] = an FFN sub-layer on the normalized input h[T, n_embd].
using FFNBlock = void (*)(const LayerCtx& c, const float* h, int64_t T, float* out);

// x[T, n_embd] += attention(norm(x)); x += ffn(norm(x))
void pre_norm_layer(const LayerCtx& c, float* x, int64_t T, FFNBlock ffn);
// pre_norm_layer with the SwiGLU FFN
void llama_layer_forward(const LayerCtx& c, float* x, int64_t T);
// Throws unless every layer has attn_q_norm and attn_k_norm (qwen3, qwen3moe).
void require_qk_norms(const ModelWeights& w, const std::string& arch);
}
