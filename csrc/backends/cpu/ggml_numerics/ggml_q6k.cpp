// ggml_q6k.cpp — Q6_K weight x f32 activation matmul in llama.cpp's exact float order
// (ggml_order.h), for its x86 CPU backend built with AVX-512.
//
// llama.cpp first rounds every activation row to Q8_K (per 256 elements: an f32 scale d_x, 256
// int8 quants x, and bsums, the sums of each 16 of them). Below, q[e] are a weight block's 6-bit
// quants without their -32 offset (0..63), sc[s] its int8 scale of the 16 elements of
// subblock s, d_w its fp16 scale. Every integer sum is exact, so only the float steps have an
// order, and which order depends on the number of activation rows M:
//
// M >= 8, its tiled matmul: the whole block becomes one integer,
//     s = sum_e sc[e/16] * q[e] * x[e]  -  32 * sum_s sc[s] * bsums[s],
// which is converted to float, multiplied by d_w, and then by d_x in a fused multiply-add
// onto the output:   y = 0;  for each block:  y = fmaf((float)s * d_w, d_x, y).
//
// M < 8, ggml_vec_dot_q6_K_q8_K (its AVX2 code, which AVX-512 builds run): eight integer lanes
// per block. Lane l holds the elements with (e % 32) / 4 == l, yet takes the offset correction
// of subblocks 2l and 2l+1, whatever elements those hold (the lanes differ from any split of
// the block's own terms, so this must be copied as is):
//     S[l] = sum_{(e % 32) / 4 == l} sc[e/16] * q[e] * x[e]  -  32 * (sc[2l] bsums[2l] + sc[2l+1] bsums[2l+1])
//     acc[l] = fmaf(d_x * d_w, (float)S[l], acc[l]);   y = hsum8(acc)   (ggml_math.h)
//
// Either way an output depends on its two rows only: not on the tiling or the thread split.
#include "backends/cpu/ggml_numerics/ggml_order.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/ggml_numerics/ggml_math.h"
#include "backends/cpu/quants/quants.h"
#include "backends/cpu/quants/dot/dot_impl.h"

namespace lll {
namespace ggml_order {

namespace {

constexpr int64_t kTiledMinRows = 8;   // llama.cpp's tiled matmul takes batches of 8 rows and more

inline float h2f(fp16_t h) { return fp16_to_f32(h); }

// ---------------------------------------------------------------- scalar reference

// The 256 quants of a block in element order, unsigned (the -32 is applied through bsums).
void unpack_ref(const block_q6_K& b, uint8_t* q) {
    for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        uint8_t* o = q + 128 * h;
        for (int l = 0; l < 32; ++l) {
            o[l] = (uint8_t)((ql[l] & 15) | ((qh[l] & 3) << 4));
            o[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

// The eight lanes S[l] of the header comment.
void lane_ints_ref(const block_q6_K& w, const block_q8_K& x, int32_t* S) {
    uint8_t q[QK_K];
    unpack_ref(w, q);
    for (int l = 0; l < 8; ++l)
        S[l] = -32 * (w.scales[2 * l] * x.bsums[2 * l] + w.scales[2 * l + 1] * x.bsums[2 * l + 1]);
    for (int e = 0; e < QK_K; ++e) S[(e % 32) / 4] += w.scales[e / 16] * q[e] * x.qs[e];
}

float dot_tiled_ref(int64_t nb, const block_q6_K* w, const block_q8_K* x) {
    float y = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int32_t S[8], s = 0;
        lane_ints_ref(w[b], x[b], S);
        for (int l = 0; l < 8; ++l) s += S[l];
        y = fmaf((float)s * h2f(w[b].d), x[b].d, y);
    }
    return y;
}

float dot_vec_ref(int64_t nb, const block_q6_K* w, const block_q8_K* x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < nb; ++b) {
        int32_t S[8];
        lane_ints_ref(w[b], x[b], S);
        const float d = x[b].d * h2f(w[b].d);
        for (int l = 0; l < 8; ++l) acc[l] = fmaf(d, (float)S[l], acc[l]);
    }
    return hsum8(acc);
}

// Weight rows [n0, n1) against all M activation rows (Q8_K, nb blocks each).
void rows_ref(int64_t nb, const block_q6_K* W, int64_t n0, int64_t n1, const block_q8_K* X, int64_t M,
              float* Y, int64_t ldy, bool tiled, float*) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n)
            Y[m * ldy + n] = tiled ? dot_tiled_ref(nb, W + n * nb, X + m * nb) : dot_vec_ref(nb, W + n * nb, X + m * nb);
}

// ---------------------------------------------------------------- AVX2

#if LLL_BUILD_AVX2
// A weight block in registers for AVX2: quants in element order (q[k]: elements 32k..32k+31),
// the int16 multiplier of each byte pair of q[k] (pair j: subblock 2k + j / 8), the 16 scales as
// int16 (for the bsums correction), and d_w.
struct WRegs2 {
    __m256i q[8], sc[8];
    __m256i sc16;
    float d;
};

inline void unpack(const block_q6_K& b, WRegs2& r) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {   // unpack_ref's four 32-element runs of each half
        const __m256i lo = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h));
        const __m256i hi = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * h));
        auto top = [&](int shift) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m2), 4); };
        r.q[4 * h] = _mm256_or_si256(_mm256_and_si256(lo, m4), top(0));
        r.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(hi, m4), top(2));
        r.q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m4), top(4));
        r.q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m4), top(6));
    }
    for (int k = 0; k < 8; ++k)
        r.sc[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(b.scales[2 * k])),
                                          _mm_set1_epi16(b.scales[2 * k + 1]), 1);
    r.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales));
    r.d = h2f(b.d);
}

// S[0..7] of the header comment: 32-bit lane i of a 32-element product holds elements 4i..4i+3,
// ggml's lane i. q * x pairs fit int16 (2 * 63 * 127), as in ggml's maddubs.
inline __m256i lane_ints(const WRegs2& w, const block_q8_K& x) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k)
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w.q[k], _mm256_loadu_si256((const __m256i*)(x.qs + 32 * k))), w.sc[k]));
    const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)x.bsums), w.sc16);
    return _mm256_sub_epi32(acc, _mm256_slli_epi32(corr, 5));
}

// Sums of the eight lanes of four rows, as [a, b, c, d].
inline __m128i hsum4x8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

#endif

// ---------------------------------------------------------------- AVX-512 (VNNI)

#if LLL_BUILD_AVX512
// A weight block in registers: quants in element order (q[k]: elements 64k..64k+63), the
// int16 multiplier of each byte pair of q[k] (its subblock's scale: pair j is element 64k + 2j,
// subblock 4k + j / 8), the 16 scales as int16 (for the bsums correction), and d_w.
struct WRegs512 {
    __m512i q[4], sc[4];
    __m256i sc16;
    float d;
};

alignas(64) const int16_t kScaleIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

inline void unpack(const block_q6_K& b, WRegs512& r) {
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
        const __m256i qh = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * h));
        // high bits of the half's elements 0..63: qh bits 0-1 then 2-3; of 64..127: bits 4-5 then 6-7
        const __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i h23 = _mm512_srli_epi16(h01, 4);
        r.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(h01, m2), 4));
        r.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                         _mm512_slli_epi16(_mm512_and_si512(h23, m2), 4));
    }
    r.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales));
    const __m512i s = _mm512_zextsi256_si512(r.sc16);
    for (int k = 0; k < 4; ++k) r.sc[k] = _mm512_permutexvar_epi16(_mm512_load_si512(kScaleIdx[k]), s);
    r.d = h2f(b.d);
}

// S[0..7] of the header comment. 32-bit lane i of a 64-element product holds elements 4i..4i+3,
// which belong to ggml's lane i % 8: the two 256-bit halves add up to its eight lanes.
inline __m256i lane_ints(const WRegs512& w, const block_q8_K& x) {
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k)   // q * x pairs fit int16 (2 * 63 * 127), as in ggml's maddubs
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w.q[k], _mm512_loadu_si512(x.qs + 64 * k)), w.sc[k]);
    const __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)x.bsums), w.sc16);
    return _mm256_sub_epi32(s, _mm256_slli_epi32(corr, 5));
}

#endif

#if LLL_BUILD_AVX2
// One weight block into the tiled-order sums y[0..M): four activation rows per step.
template <class R>
inline void block_tiled(const R& w, const block_q8_K* x, int64_t nb, int64_t M, float* y) {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) {
        const block_q8_K &x0 = x[m * nb], &x1 = x[(m + 1) * nb], &x2 = x[(m + 2) * nb], &x3 = x[(m + 3) * nb];
        const __m128i s = hsum4x8(lane_ints(w, x0), lane_ints(w, x1), lane_ints(w, x2), lane_ints(w, x3));
        const __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(w.d));
        _mm_storeu_ps(y + m, _mm_fmadd_ps(t, _mm_setr_ps(x0.d, x1.d, x2.d, x3.d), _mm_loadu_ps(y + m)));
    }
    for (; m < M; ++m) {
        const __m256i z = _mm256_setzero_si256();
        const int32_t s = _mm_cvtsi128_si32(hsum4x8(lane_ints(w, x[m * nb]), z, z, z));
        y[m] = fmaf((float)s * w.d, x[m * nb].d, y[m]);
    }
}

// Both SIMD levels: R is a weight block in registers (WRegs2 / WRegs512) with its lane_ints.
template <class R>
void rows_simd(int64_t nb, const block_q6_K* W, int64_t n0, int64_t n1, const block_q8_K* X, int64_t M,
                 float* Y, int64_t ldy, bool tiled, float* acc) {
    for (int64_t n = n0; n < n1; ++n) {
        const block_q6_K* w = W + n * nb;
        // decode streams the rows from memory: prefetch 8 KiB ahead (the hardware prefetchers
        // alone leave one core well under the memory rate)
        for (size_t o = 0; o < nb * sizeof(block_q6_K); o += 64) __builtin_prefetch((const char*)w + o + 8192, 0, 3);
        std::fill(acc, acc + (tiled ? M : 8 * M), 0.0f);
        for (int64_t b = 0; b < nb; ++b) {
            R r;
            unpack(w[b], r);
            if (tiled) {
                block_tiled(r, X + b, nb, M, acc);
                continue;
            }
            for (int64_t m = 0; m < M; ++m) {
                const block_q8_K& x = X[m * nb + b];
                const __m256 s = _mm256_cvtepi32_ps(lane_ints(r, x));
                _mm256_storeu_ps(acc + 8 * m, _mm256_fmadd_ps(_mm256_set1_ps(x.d * r.d), s, _mm256_loadu_ps(acc + 8 * m)));
            }
        }
        for (int64_t m = 0; m < M; ++m) Y[m * ldy + n] = tiled ? acc[m] : hsum8(acc + 8 * m);
    }
}

#endif

typedef void (*RowsFn)(int64_t, const block_q6_K*, int64_t, int64_t, const block_q8_K*, int64_t, float*, int64_t,
                       bool, float*);

RowsFn rows_fn(bool use_reference) {
    if (use_reference) return rows_ref;
#if LLL_BUILD_AVX512
    if (isa_available(Isa::AVX512)) return rows_simd<WRegs512>;
#endif
#if LLL_BUILD_AVX2
    if (isa_available(Isa::AVX2)) return rows_simd<WRegs2>;
#endif
    return rows_ref;
}

}  // namespace

void matmul_q6_K(ThreadPool& pool, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y,
                 int64_t ldy, bool use_reference) {
    if (K <= 0 || K % QK_K) throw std::invalid_argument("matmul_q6_K: K must be a positive multiple of 256");
    if (N <= 0 || M <= 0) return;
    const int64_t nb = K / QK_K;
    const block_q8_K* xq = (const block_q8_K*)quantized_activations(pool, GGMLType::Q8_K, X, M, K);
    const bool tiled = M >= kTiledMinRows;
    const RowsFn rows = rows_fn(use_reference);
    const block_q6_K* w = (const block_q6_K*)W;
    for_row_runs(pool, N, 16, N * K * M, [&](int64_t n0, int64_t n1) {
        thread_local std::vector<float> acc;   // per activation row: y, or ggml's 8 lanes
        acc.resize((size_t)(tiled ? M : 8 * M));
        rows(nb, w, n0, n1, xq, M, Y, ldy, tiled, acc.data());
    });
}

}  // namespace ggml_order
}  // namespace lll
