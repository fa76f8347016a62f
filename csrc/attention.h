// attention.h — causal (optionally sliding-window) attention over the paged KV cache.
#pragma once
#include <stdint.h>
#include "kv_cache.h"
#include "model.h"
#include "threadpool.h"

namespace lll {

// Stores k[T, kv_width] and v[T, kv_width] (f32) as F16 in each token's cache slot.
void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b);

// out[T, n_head*head_dim] = softmax(scale * q.K^T) . V per head, reading K/V of each token's
// sequence through its block table, positions [max(0, pos - window + 1), pos] (window 0 = all).
// Numerics as llama.cpp without flash attention: q rounded to F16 for the q.k products, softmax
// in f32 with a double sum, probabilities rounded to F16 for the product with V.
void attention(ThreadPool& pool, const KVCache& kv, int layer, const float* q, float* out,
               const Batch& b, int n_head, int n_head_kv, int head_dim, float scale, int window);

}  // namespace lll
