// attention.cpp — see attention.h.
#include "attention.h"
#include <math.h>
#include <algorithm>
#include <vector>
#include "fp16.h"
#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLL_ATTN_F16C 1
#endif

namespace lll {

void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b) {
    const int bs = kv.block_size();
    const int64_t w = kv.kv_width();
    for (int64_t t = 0; t < b.n_tokens; ++t) {
        const int32_t pos = b.positions[t];
        const int32_t* table = b.block_tables + (int64_t)b.seq_of_token[t] * b.max_blocks;
        const int64_t block = table[pos / bs];
        fp16_t* kd = kv.k_slot(layer, block, pos % bs);
        fp16_t* vd = kv.v_slot(layer, block, pos % bs);
        for (int64_t i = 0; i < w; ++i) {
            kd[i] = f32_to_fp16(k[t * w + i]);
            vd[i] = f32_to_fp16(v[t * w + i]);
        }
    }
}

// dot(q, k) with q already F16-rounded (as f32) and k in F16.
static inline float dot_q_f16(const float* q, const fp16_t* k, int n) {
#ifdef LLL_ATTN_F16C
    if (n % 32 == 0) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int i = 0; i < n; i += 32) {
            for (int j = 0; j < 4; ++j) {
                const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(k + i + 8 * j)));
                acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8 * j), kv, acc[j]);
            }
        }
        const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        r = _mm_add_ss(r, _mm_movehdup_ps(r));
        return _mm_cvtss_f32(r);
    }
#endif
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += (double)(q[i] * fp16_to_f32(k[i]));
    return (float)sum;
}

// acc[n] += p * v[n] with v in F16.
static inline void axpy_f16(float* acc, float p, const fp16_t* v, int n) {
#ifdef LLL_ATTN_F16C
    if (n % 8 == 0) {
        const __m256 pv = _mm256_set1_ps(p);
        for (int i = 0; i < n; i += 8) {
            const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(v + i)));
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, vv, _mm256_loadu_ps(acc + i)));
        }
        return;
    }
#endif
    for (int i = 0; i < n; ++i) acc[i] += p * fp16_to_f32(v[i]);
}

// One (token, head): softmax over the visible positions, weighted sum of V.
static void attend_one(const KVCache& kv, int layer, const float* q, float* out, const int32_t* table,
                       int32_t pos, int window, int kv_off, int head_dim, float scale,
                       std::vector<float>& scores, std::vector<float>& qh) {
    const int bs = kv.block_size();
    const int32_t start = window > 0 ? std::max<int32_t>(0, pos - window + 1) : 0;
    const int32_t n = pos - start + 1;
    if ((int32_t)scores.size() < n) scores.resize(n);
    for (int d = 0; d < head_dim; ++d) qh[d] = fp16_to_f32(f32_to_fp16(q[d]));
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; ++j) {
        const int32_t p = start + j;
        const fp16_t* k = kv.k_slot(layer, table[p / bs], p % bs) + kv_off;
        scores[j] = dot_q_f16(qh.data(), k, head_dim) * scale;
        mx = std::max(mx, scores[j]);
    }
    double sum = 0.0;
    for (int32_t j = 0; j < n; ++j) {
        const float e = expf(scores[j] - mx);
        scores[j] = e;
        sum += (double)e;
    }
    const float inv = (float)(1.0 / sum);
    std::fill(out, out + head_dim, 0.0f);
    for (int32_t j = 0; j < n; ++j) {
        const int32_t p = start + j;
        const float pj = fp16_to_f32(f32_to_fp16(scores[j] * inv));
        axpy_f16(out, pj, kv.v_slot(layer, table[p / bs], p % bs) + kv_off, head_dim);
    }
}

void attention(ThreadPool& pool, const KVCache& kv, int layer, const float* q, float* out,
               const Batch& b, int n_head, int n_head_kv, int head_dim, float scale, int window) {
    const int group = n_head / n_head_kv;
    const int64_t n_tasks = b.n_tokens * n_head;
    pool.run([&](int ith, int nth) {
        std::vector<float> scores, qh(head_dim);
        // Interleaved assignment balances causal rows of different lengths.
        for (int64_t task = ith; task < n_tasks; task += nth) {
            const int64_t t = task / n_head;
            const int h = (int)(task % n_head);
            const int32_t* table = b.block_tables + (int64_t)b.seq_of_token[t] * b.max_blocks;
            const int64_t off = (t * n_head + h) * (int64_t)head_dim;
            attend_one(kv, layer, q + off, out + off, table, b.positions[t], window,
                       (h / group) * head_dim, head_dim, scale, scores, qh);
        }
    });
}

}  // namespace lll
