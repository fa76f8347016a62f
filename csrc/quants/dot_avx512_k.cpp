// dot_avx512_k.cpp — AVX-512 (VNNI) tile kernels for the K-quants with Q8_K activations.
// Scalar references: dot_scalar.cpp.
//
// A super-block (256 elements) is walked in 4 chunks of 64: the weight quants of a chunk are
// unpacked to bytes in [0, 63] in element order, multiplied with the activation bytes by
// vpmaddubsw (pairs, int16, no saturation possible: 63 * 127 * 2 < 32767) and summed with the
// sub-block scales by vpdpwssd into int32 lanes. Per super-block the int32 lanes (exact) are
// converted and accumulated with d_w * d_x in one FMA; mins (Q4_K / Q5_K) and the -32 offset
// (Q6_K, and the -4 of Q3_K) use the activation's 16-element sums (bsums).
#include "dot_impl.h"

#if LLL_BUILD_AVX512
#include <immintrin.h>
#include <string.h>

#include "../fp16.h"

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

// 32 bytes of packed nibbles -> 64 bytes: low nibbles, then high nibbles.
inline __m512i unpack_nibbles_32(const uint8_t* p) {
    const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)p));
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(b, shift), _mm512_set1_epi8(0x0F));
}

// ---- Q4_K / Q5_K -----------------------------------------------------------------------------

// Scales of chunk j: sub-blocks 2j (first 32 bytes) and 2j + 1, as int16.
alignas(64) constexpr int16_t kK4ScaleIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};

// Per weight row and super-block state shared by Q4_K and Q5_K.
struct K4Row {
    const uint8_t* qs;
    const uint8_t* qh;      // Q5_K only
    __m512i scales;         // int16 lanes 0..7: the 8 sub-block scales
    __m512i mins;           // int16 lanes 0..15: min of sub-block g / 2 (pairs with bsums[g])
    float d, dmin;
};

inline K4Row k4_row(const uint8_t* packed, fp16_t d, fp16_t dmin, const uint8_t* qs, const uint8_t* qh) {
    // 6-bit fields: scales 0..3 / mins 0..3 in the low 6 bits of bytes 0..3 / 4..7; scales 4..7
    // and mins 4..7 split between the nibbles of bytes 8..11 and the top 2 bits of bytes 0..7.
    uint32_t u[3];
    memcpy(u, packed, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3f;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    const uint32_t m_lo = u[1] & 0x3f3f3f3f;
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const __m128i sc8 = _mm_cvtsi64_si128((long long)(sc_lo | ((uint64_t)sc_hi << 32)));
    const __m128i m8 = _mm_cvtsi64_si128((long long)(m_lo | ((uint64_t)m_hi << 32)));
    K4Row row;
    row.qs = qs;
    row.qh = qh;
    row.scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sc8));
    row.mins = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)));
    row.d = h2f(d);
    row.dmin = h2f(dmin);
    return row;
}

struct Q4KStep {
    static constexpr int kBytes = sizeof(block_q4_K);
    static constexpr bool kMins = true;
    using Row = K4Row;
    static Row row(const uint8_t* p) {
        const block_q4_K* b = (const block_q4_K*)p;
        return k4_row(b->scales, b->d, b->dmin, b->qs, nullptr);
    }
    static __m512i quants(const Row& w, int j) { return unpack_nibbles_32(w.qs + 32 * j); }
    static __m512i scales(const Row& w, int j) { return spread16(kK4ScaleIdx[j], w.scales); }
};

struct Q5KStep {
    static constexpr int kBytes = sizeof(block_q5_K);
    static constexpr bool kMins = true;
    using Row = K4Row;
    static Row row(const uint8_t* p) {
        const block_q5_K* b = (const block_q5_K*)p;
        return k4_row(b->scales, b->d, b->dmin, b->qs, b->qh);
    }
    static __m512i quants(const Row& w, int j) {
        // 5th bits: bit 2j of qh[l] for the first 32 elements of the chunk, bit 2j + 1 after.
        const __m512i q = unpack_nibbles_32(w.qs + 32 * j);
        const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)w.qh));
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))),
                                               _mm256_set1_epi8((char)(2 << (2 * j))), 1);
        return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(h, bit), q, _mm512_set1_epi8(16));
    }
    static __m512i scales(const Row& w, int j) { return spread16(kK4ScaleIdx[j], w.scales); }
};

// ---- Q6_K ------------------------------------------------------------------------------------

// Scales of chunk t: 16-element groups 4t .. 4t + 3, as int16.
alignas(64) constexpr int16_t kK6ScaleIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

struct Q6KStep {
    static constexpr int kBytes = sizeof(block_q6_K);
    static constexpr bool kMins = false;
    static constexpr int kOffsetShift = 5;   // quants stored + 32
    struct Row {
        const uint8_t* ql;
        const uint8_t* qh;
        __m512i scales;     // int16 lanes 0..15: the 16 group scales (signed)
        float d;
    };
    static Row row(const uint8_t* p) {
        const block_q6_K* b = (const block_q6_K*)p;
        return {b->ql, b->qh,
                _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b->scales))), h2f(b->d)};
    }
    // Chunk t = 2h + s covers elements 128h + 64s .. + 63: low 4 bits from ql[64h ..] (low
    // nibbles for s = 0, high for s = 1), 2 high bits from qh[32h + l] >> (4s + 2 * (l >= 32)).
    static __m512i quants(const Row& w, int t) {
        const int h = t >> 1, s = t & 1;
        const __m512i ql = _mm512_loadu_si512(w.ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(w.qh + 32 * h)));
        const __m512i low = s == 0 ? ql : _mm512_srli_epi16(ql, 4);
        // move qh bits (4s, 4s + 1) of the first half / (4s + 2, 4s + 3) of the second to bits 4, 5
        const __m512i high = s == 0
            ? _mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1))
            : _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
        // (low & 0x0F) | (high & 0x30)
        return _mm512_ternarylogic_epi32(low, _mm512_and_si512(high, _mm512_set1_epi8(0x30)),
                                         _mm512_set1_epi8(0x0F), 0xEC);
    }
    static __m512i scales(const Row& w, int t) { return spread16(kK6ScaleIdx[t], w.scales); }
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

// Per super-block: acc += d_w d_x isum, with the min or offset corrections. Mins (Q4_K, Q5_K,
// Q2_K): - dmin_w d_x sum(min_g bsums_g). Offsets (Q6_K: quants stored + 32, Q3_K: + 4):
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

template <int R, int C> using Q4KTile = KTile<Q4KStep, R, C>;
template <int R, int C> using Q5KTile = KTile<Q5KStep, R, C>;
template <int R, int C> using Q6KTile = KTile<Q6KStep, R, C>;
template <int R, int C> using Q2KTile = KTile<Q2KStep, R, C>;
template <int R, int C> using Q3KTile = KTile<Q3KStep, R, C>;

}  // namespace avx512k_impl
using namespace avx512k_impl;

const KernelSet* avx512_kquant_kernels(GGMLType wtype) {
    // Tile shapes measured on a Sapphire Rapids core (GOP/s with weights in L2).
    static const KernelSet q4_K = make_tile_set<Q4KTile, 2, 4, 1>(Isa::AVX512),
                           q5_K = make_tile_set<Q5KTile, 2, 4, 1>(Isa::AVX512),
                           q6_K = make_tile_set<Q6KTile, 2, 4, 2>(Isa::AVX512),
                           q2_K = make_tile_set<Q2KTile, 2, 4, 1>(Isa::AVX512),
                           q3_K = make_tile_set<Q3KTile, 2, 4, 1>(Isa::AVX512);
    switch (wtype) {
        case GGMLType::Q4_K: return &q4_K;
        case GGMLType::Q5_K: return &q5_K;
        case GGMLType::Q6_K: return &q6_K;
        case GGMLType::Q2_K: return &q2_K;
        case GGMLType::Q3_K: return &q3_K;
        default: return nullptr;
    }
}

}  // namespace kern
}  // namespace lll

#else   // !LLL_BUILD_AVX512
namespace lll {
namespace kern {
const KernelSet* avx512_kquant_kernels(GGMLType) { return nullptr; }
}  // namespace kern
}  // namespace lll
#endif
