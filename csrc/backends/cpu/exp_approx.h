// exp_approx.h — exp(x) for x <= 0 in float, one definition for the scalar, AVX2 and AVX-512 code.
//
// Softmax (attention) and SiLU (SwiGLU) only ever need exp of a non-positive argument. The
// scalar function is the reference the 8- and 16-lane ones are held to: the same fused multiply-adds in
// the same order, so the two are bit-identical (tests/test_attention.py, tests/test_kernels.py).
// n = round(x / ln2), r = x - n*ln2 (two-part ln2), exp(r) by a degree-7 form 1 + r*(1 + r*p(r))
// with Cephes' expf minimax coefficients, times 2^n. Below kExpMin (and for NaN) it gives 0.
#pragma once
#include <math.h>
#include <stdint.h>
#include "common/fp16.h"
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace lll {

constexpr float kExpMin = -87.3f;              // x * log2e >= -126: 2^n stays a normal float
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kRoundMagic = 12582912.0f;     // 1.5 * 2^23: adding it rounds to an integer
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float exp_nonpositive(float x) {
    if (!(x >= kExpMin)) return 0.0f;                                 // also -inf and NaN
    const float n = fmaf(x, kLog2e, kRoundMagic) - kRoundMagic;       // round(x * log2e), exact
    float r = fmaf(n, -kLn2Hi, x);
    r = fmaf(n, -kLn2Lo, r);
    float y = kExpPoly[0];
    for (int i = 1; i < 6; ++i) y = fmaf(y, r, kExpPoly[i]);
    y = fmaf(y, r, 1.0f);
    y = fmaf(y, r, 1.0f);
    return y * bits_to_f32((uint32_t)((int32_t)n + 127) << 23);       // * 2^n, n in [-126, 0]
}

#if defined(__AVX512F__)
// 16 lanes of exp_nonpositive (same operations).
inline __m512 exp_nonpositive16(__m512 x) {
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), _mm512_set1_ps(kRoundMagic)),
                                   _mm512_set1_ps(kRoundMagic));
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
    __m512 y = _mm512_set1_ps(kExpPoly[0]);
    for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpPoly[i]));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_GE_OQ), y);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// 8 lanes of exp_nonpositive (same operations).
inline __m256 exp_nonpositive8(__m256 x) {
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRoundMagic)),
                                   _mm256_set1_ps(kRoundMagic));
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
    __m256 y = _mm256_set1_ps(kExpPoly[0]);
    for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpPoly[i]));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_GE_OQ), y);
}
#endif

}  // namespace lll
