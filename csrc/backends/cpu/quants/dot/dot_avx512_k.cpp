// dot_avx512_k.cpp — AVX-512 (VNNI) tile kernels for Q2_K / Q3_K with Q8_K activations (Q4_K,
// Q5_K and Q6_K use the block-sequential kernels of bseq.h).
// Scalar references: dot_scalar.cpp.
//
// A super-block (256 elements) is walked in 4 chunks of 64: the weight quants of a chunk are
// unpacked to bytes in [0, 63] in element order, multiplied with the activation bytes by
// vpmaddubsw (pairs, int16, no saturation possible: 63 * 127 * 2 < 32767) and summed with the
// sub-block scales by vpdpwssd into int32 lanes. Per super-block the int32 lanes (exact) are
// converted and accumulated with d_w * d_x in one FMA; mins (Q2_K) and the -4 offset
// (Q3_K) use the activation's 16-element sums (bsums).
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX512
#include <immintrin.h>
#include <string.h>

#include "common/fp16.h"

namespace lll {
namespace kern {
// Named, not anonymous: GCC gives templates instantiated on alias templates from an anonymous
// namespace external (weak) linkage, so equally named tiles of two files would be merged.
namespace avx512k_impl {

inline float h2f(fp16_t h) { return _cvtsh_ss(h); }

// int16 lane i of the result = lane idx[i] of v (vpermw).
inline __m512i spread16(const int16_t (&idx)[32], __m512i v) {
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(idx), v);
}

// Scales of chunk t (Q2_K / Q3_K): 16-element groups 4t .. 4t + 3, as int16.
alignas(64) constexpr int16_t kK6ScaleIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

// ---- Q2_K / Q3_K ----------------------------------------------------------------------------
// Element 128h + 32s + l has its 2 low bits in qs[32h + l] >> 2s; chunk t = 2h + (s >> 1) holds
// s = 2 (t & 1) in its first 32 bytes and s + 1 in the next 32.

inline __m512i k23_low_bits(const uint8_t* qs, int t) {
    const int h = t >> 1, s0 = 2 * (t & 1);
    const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(qs + 32 * h)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * s0)), _mm256_set1_epi16((short)(2 * s0 + 2)), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(b, shift), _mm512_set1_epi8(3));
}

struct Q2KStep {
    static constexpr int kBytes = sizeof(block_q2_K);
    static constexpr bool kMins = true;
    struct Row {
        const uint8_t* qs;
        __m512i scales, mins;   // int16 lanes 0..15: low / high nibbles of the 16 scale bytes
        float d, dmin;
    };
    static Row row(const uint8_t* p) {
        const block_q2_K* b = (const block_q2_K*)p;
        const __m128i sc = _mm_loadu_si128((const __m128i*)b->scales);
        const __m128i low4 = _mm_set1_epi8(0x0F);
        return {b->qs, _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc, low4))),
                _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), low4))),
                h2f(b->d), h2f(b->dmin)};
    }
    static __m512i quants(const Row& w, int t) { return k23_low_bits(w.qs, t); }
    static __m512i scales(const Row& w, int t) { return spread16(kK6ScaleIdx[t], w.scales); }
};

struct Q3KStep {
    static constexpr int kBytes = sizeof(block_q3_K);
    static constexpr bool kMins = false;
    static constexpr int kOffsetShift = 2;   // value = q' - 4 with q' = low | high << 2
    struct Row {
        const uint8_t* qs;
        const uint8_t* hmask;
        __m512i scales;         // int16 lanes 0..15: the 16 signed scales
        float d;
    };
    static Row row(const uint8_t* p) {
        const block_q3_K* b = (const block_q3_K*)p;
        return {b->qs, b->hmask, _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(q3_K_scales_i8(b->scales))), h2f(b->d)};
    }
    static __m512i quants(const Row& w, int t) {
        // high bit of element 128h + 32s + l: bit 4h + s of hmask[l], moved to bit 2
        const int h = t >> 1, s0 = 2 * (t & 1);
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)w.hmask));
        const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * h + s0)), _mm256_set1_epi16((short)(4 * h + s0 + 1)), 1);
        const __m512i high = _mm512_slli_epi16(_mm512_srlv_epi16(hb, shift), 2);
        // low | (high & 4)
        return _mm512_ternarylogic_epi32(k23_low_bits(w.qs, t), high, _mm512_set1_epi8(4), 0xF8);
    }
    static __m512i scales(const Row& w, int t) { return spread16(kK6ScaleIdx[t], w.scales); }
};

// ---- the K-quant tile ------------------------------------------------------------------------

// Per super-block: acc += d_w d_x isum, with the min or offset corrections. Mins (Q2_K):
// - dmin_w d_x sum(min_g bsums_g). Offsets (Q3_K: quants stored + 4):
// isum -= offset * sum(sc_g bsums_g), exactly, in int32, before the conversion.
template <class S>
inline void finish_superblock(const typename S::Row& w, const block_q8_K* x, __m512i isum, __m512& acc) {
    const __m256i bsums = _mm256_loadu_si256((const __m256i*)x->bsums);
    if constexpr (S::kMins) {
        const __m512i summ = _mm512_zextsi256_si512(_mm256_madd_epi16(bsums, _mm512_castsi512_si256(w.mins)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(w.d * x->d), acc);
        acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_set1_ps(w.dmin * x->d), acc);
    } else {
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm512_castsi512_si256(w.scales)), S::kOffsetShift);
        isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(off));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(w.d * x->d), acc);
    }
}

template <class S, int R, int C>
struct KTile {
    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        __m512 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
        for (int64_t i = 0; i < k / QK_K; ++i) {
            typename S::Row wr[R];
            const block_q8_K* xb[C];
            for (int r = 0; r < R; ++r) {
                prefetch_ahead<S::kBytes>(w + r * ws + i * S::kBytes);
                wr[r] = S::row(w + r * ws + i * S::kBytes);
            }
            for (int c = 0; c < C; ++c) xb[c] = (const block_q8_K*)(x + c * xs) + i;
            __m512i isum[R][C];
            for (int r = 0; r < R; ++r)
                for (int c = 0; c < C; ++c) isum[r][c] = _mm512_setzero_si512();
            for (int j = 0; j < 4; ++j) {
                __m512i yv[C];
                for (int c = 0; c < C; ++c) yv[c] = _mm512_loadu_si512(xb[c]->qs + 64 * j);
                for (int r = 0; r < R; ++r) {
                    const __m512i q = S::quants(wr[r], j), sc = S::scales(wr[r], j);
                    for (int c = 0; c < C; ++c)
                        isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(q, yv[c]), sc);
                }
            }
            for (int r = 0; r < R; ++r)
                for (int c = 0; c < C; ++c) finish_superblock<S>(wr[r], xb[c], isum[r][c], acc[r][c]);
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
};

template <int R, int C> using Q2KTile = KTile<Q2KStep, R, C>;
template <int R, int C> using Q3KTile = KTile<Q3KStep, R, C>;

}  // namespace avx512k_impl
using namespace avx512k_impl;

// Tile shapes measured on a Sapphire Rapids core (GOP/s with weights in L2).
LLL_DEFINE_KERNEL_SET(avx512_q2_K, (make_tile_set<Q2KTile, 2, 4, 1>(Isa::AVX512)))
LLL_DEFINE_KERNEL_SET(avx512_q3_K, (make_tile_set<Q3KTile, 2, 4, 1>(Isa::AVX512)))

}  // namespace kern
}  // namespace lll

#endif
