// attention.h — causal (optionally sliding-window) attention over the paged KV cache.
//
// Work is cut into chunks of (sequence, kv head, run of consecutive query tokens): every query
// head of the GQA group and every token of the chunk shares each 16-key tile of K and V, which is
// converted from F16 once per chunk. The float operations that produce one (token, head) output
// depend only on that row's own query, position and window — never on the batch, the chunk, the
// thread count or the kernel (scalar or AVX-512): outputs are bit-identical in every setting.
#pragma once
#include <math.h>
#include <stdint.h>
#include "model/kv_cache.h"
#include "model/model.h"
#include "common/threadpool.h"
#include "backends/cpu/exp_approx.h"

namespace lll {

// Stores k[T, kv_width] and v[T, kv_width] (f32) as F16 in each token's cache slot.
void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b);

// Which implementation attention() runs; all give bit-identical results.
enum class AttnKernel : int { Auto = -1, Scalar = 0, AVX2 = 1, AVX512 = 2 };

// Whether the AVX-512 / AVX2 kernel is compiled in and this CPU runs it (LOCALLLM_ISA may cap it).
bool attention_avx512_available();
bool attention_avx2_available();
// The level an attention call runs: `asked` (Auto = the widest this process may use) where the
// CPU has it and the head fits it (avx512_fits / avx2_fits), else the next narrower one, down to
// Scalar. Asking for a level this CPU/build lacks throws std::invalid_argument.
AttnKernel pick_attention_kernel(AttnKernel asked, bool avx512_fits, bool avx2_fits);

// out[T, n_head*head_dim] = softmax(scale * q.K^T) . V per head, reading K/V of each token's
// sequence through its block table, positions [max(0, pos - window + 1), pos] (window 0 = all);
// tokens of a sequence come in order of position, equal positions allowed (an encoder's tokens).
// Numerics as llama.cpp without flash attention: q rounded to F16 for the q.k products (each a
// sequential FMA over d), softmax with the max subtracted and a double sum of the exps (16 lanes
// by key position mod 16, reduced as a fixed tree), probabilities rounded to F16 for the product
// with V (a sequential FMA over keys). Auto picks AVX-512 when available and head_dim % 16 == 0,
// else AVX2 when available and head_dim % 8 == 0, else the scalar reference.
// softcap > 0: each score s becomes tanh(s * (1/softcap)) * softcap before the softmax (Gemma 2).
void attention(ThreadPool& pool, const KVCache& kv, int layer, const float* q, float* out,
               const Batch& b, int n_head, int n_head_kv, int head_dim, float scale, int window,
               float softcap = 0.0f, AttnKernel kernel = AttnKernel::Auto);

// The same attention in llama.cpp's float order (Numerics::LlamaCpp; attention_ggml.cpp): the
// q.k and p.V sums follow tinyBLAS when the batch has two or more tokens, ggml's vec_dot_f16
// when it has one, and the softmax is ggml's. `kernel` picks the level as for attention(); the
// AVX2 and AVX-512 paths are held bit for bit to the scalar code (Scalar).
void attention_ggml(ThreadPool& pool, const KVCache& kv, int layer, const float* q, float* out,
                    const Batch& b, int n_head, int n_head_kv, int head_dim, float scale, int window,
                    float softcap = 0.0f, AttnKernel kernel = AttnKernel::Auto);

// Attention logit soft-capping as llama.cpp computes it (ggml_scale, ggml_tanh, ggml_scale):
// tanh(s * (1/cap)) * cap; cap 0 = none.
inline float softcap_score(float s, float cap) { return cap > 0.0f ? tanhf(s * (1.0f / cap)) * cap : s; }

// The shape and batch checks both attention paths make before touching the cache: heads that
// divide, n_head_kv * head_dim equal to the cache's width, every token's sequence, position and
// visible blocks inside its block table. Throws std::invalid_argument naming the problem.
void check_attention_call(const KVCache& kv, const Batch& b, int n_head, int n_head_kv, int head_dim,
                          int window);
// The exp used by the softmax (scalar reference of the SIMD exp; exact same operations).
float attention_exp(float x);

namespace attn_detail {

// Keys are processed in tiles of kTile consecutive positions aligned to multiples of kTile; the
// double sum of the exps has kTile lanes, lane = key position % kTile.
constexpr int kTile = 16;

struct Shape {
    int n_head, n_head_kv, head_dim, group;   // group = n_head / n_head_kv query heads per kv head
    float scale;
    int window;                                // 0 = causal over the whole sequence
    float softcap = 0.0f;                      // 0 = none
};

// The SIMD kernels' soft-capping: row r's visible scores s[r * span + p - lo], p in
// [start[r], pos[r]] (the masked lanes stay -inf), each through softcap_score as the scalar
// reference does it.
inline void softcap_rows(float* s, int R, int64_t span, int32_t lo, const int32_t* start, const int32_t* pos,
                         float cap) {
    for (int r = 0; r < R; ++r)
        for (int32_t p = start[r]; p <= pos[r]; ++p) s[r * span + p - lo] = softcap_score(s[r * span + p - lo], cap);
}

// Query tokens [t0, t1) of one sequence (contiguous in the batch, positions that never decrease)
// and all `group` query heads of kv head `kv_head`.
struct Chunk {
    int64_t t0, t1;
    int kv_head;
    int64_t cost;                              // rows * keys, for scheduling only
};

// First key position a query at `pos` sees.
inline int32_t first_visible(int32_t pos, int window) {
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// Fixed reduction tree of the kTile double lanes: halves added pairwise, 16 -> 8 -> 4 -> 2 -> 1.
inline double sum_lanes(const double* lanes) {
    double a[kTile];
    for (int i = 0; i < kTile; ++i) a[i] = lanes[i];
    for (int w = kTile / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; ++i) a[i] = a[i] + a[i + w];
    return a[0];
}

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__F16C__)
#define LLL_ATTN_AVX512 1
// One chunk with the AVX-512 kernel (head_dim % 16 == 0); attention_avx512.cpp.
void attend_chunk_avx512(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                         const Chunk& c, const Shape& sh);
#else
#define LLL_ATTN_AVX512 0
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LLL_ATTN_AVX2 1
// One chunk with the AVX2 kernel (head_dim % 8 == 0); attention_avx2.cpp.
void attend_chunk_avx2(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                       const Chunk& c, const Shape& sh);
#else
#define LLL_ATTN_AVX2 0
#endif

}  // namespace attn_detail
}  // namespace lll
