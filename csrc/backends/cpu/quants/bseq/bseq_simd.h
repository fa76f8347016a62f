// bseq_simd.h — AVX-512 helpers shared by the block-sequential kernels (bseq_avx512.cpp,
// bseq_decode.cpp). Private to csrc/backends/cpu/quants/bseq; include only where LLL_BUILD_AVX512 holds.
#pragma once
#include <immintrin.h>
#include <string.h>

#include <algorithm>

#include "backends/cpu/quants/bseq/bseq.h"

namespace lll {
namespace bseq {
namespace simd {

// ---- transposes and gathers over the 16 rows of a panel --------------------------------------

// t[i] lane r = bytes 4i..4i+3 at byte offset `off` of row r (16 bytes per row).
inline void transpose_16x16(const uint8_t* const* rows, size_t off, __m512i* t) {
    __m512i z[4];
    for (int j = 0; j < 4; ++j) {      // 128-bit lane i of z[j] holds row 4i + j
        __m512i v = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i*)(rows[j] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(rows[4 + j] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(rows[8 + j] + off)), 2);
        z[j] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(rows[12 + j] + off)), 3);
    }
    const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
    t[0] = _mm512_unpacklo_epi64(a0, a2);
    t[1] = _mm512_unpackhi_epi64(a0, a2);
    t[2] = _mm512_unpacklo_epi64(a1, a3);
    t[3] = _mm512_unpackhi_epi64(a1, a3);
}

// 32 bytes per row: t[0..7].
inline void transpose_16x32(const uint8_t* const* rows, size_t off, __m512i* t) {
    transpose_16x16(rows, off, t);
    transpose_16x16(rows, off + 16, t + 4);
}

struct Rows {
    const uint8_t* p[kPanel];
    __m512i vidx;                  // byte offset of each row from p[0]
    Rows(const uint8_t* w, size_t ws, int nvalid) {
        alignas(64) int32_t off[kPanel];
        for (int r = 0; r < kPanel; ++r) {
            const int rr = std::min(r, nvalid - 1);   // rows past N repeat the last one
            p[r] = w + rr * ws;
            off[r] = (int32_t)(rr * ws);
        }
        vidx = _mm512_load_si512(off);
    }
    __m512i gather(size_t off) const { return _mm512_i32gather_epi32(vidx, (const void*)(p[0] + off), 1); }
};

inline __m512 f16_low(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
inline __m512 f16_high(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))); }
inline __m512i lo4(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i hi4(__m512i v) { return _mm512_and_si512(_mm512_srli_epi32(v, 4), _mm512_set1_epi8(0x0F)); }

// Dword whose byte i is 0x10 when bit i of the index (0..15) is set: a Q5 fifth-bit spread.
alignas(64) constexpr int32_t kSpread5[16] = {
    0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010, 0x00101000, 0x00101010,
    0x10000000, 0x10000010, 0x10001000, 0x10001010, 0x10100000, 0x10100010, 0x10101000, 0x10101010};

// Q4_K / Q5_K scales and mins of sub-block j for 16 rows (a0..a2: the 12 scale bytes).
inline void k4_scales(__m512i a0, __m512i a1, __m512i a2, int j, __m512i* sc, __m512i* mn) {
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    if (j < 4) {
        *sc = _mm512_and_si512(_mm512_srli_epi32(a0, 8 * j), m6);
        *mn = _mm512_and_si512(_mm512_srli_epi32(a1, 8 * j), m6);
    } else {
        const int s = 8 * (j - 4);
        const __m512i hs = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a0, s + 6), m2), 4);
        const __m512i hm = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a1, s + 6), m2), 4);
        *sc = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, s), m4), hs);
        *mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, s + 4), m4), hm);
    }
}

// Q6_K: the int8 scale of sub-block sb (0..15) for 16 rows, sign-extended; s[0..3]: the 16
// scale bytes of each row as 4 gathered dwords.
inline __m512i q6_scale(const __m512i* s, int sb) {
    return _mm512_srai_epi32(_mm512_slli_epi32(s[sb / 4], 24 - 8 * (sb % 4)), 24);
}

// Lanes of int16 pairs (lo, hi) for vpdpwssd.
inline __m512i int16_pair(__m512i lo, __m512i hi) {
    return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
}

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

inline __m512 neg(__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); }

}  // namespace simd
}  // namespace bseq
}  // namespace lll
