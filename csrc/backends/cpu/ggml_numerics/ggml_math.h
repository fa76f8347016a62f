// ggml_math.h — float operations written in the exact order llama.cpp's x86 CPU backend
// (ggml, AVX-512 build) performs them, for the "llama.cpp numerics" mode (model.h: Numerics).
//
// Bit-exact agreement with llama.cpp needs more than the same formulas: a float sum depends on
// its order. These helpers fix that order — the exp polynomial ggml vectorises, and the
// horizontal-add trees of its 8- and 16-lane accumulators — so that kernels built from them
// reproduce ggml's results bit for bit (held to llama.cpp's own intermediate tensors by
// benchmarks/llamacpp_ops.py and to the shared reference by tests/test_fidelity.py).
#pragma once
#include <math.h>
#include <stdint.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lll {
namespace ggml_order {

// exp(x) as ggml's vector expf (a degree-5 polynomial on x - n ln2, times 2^n; |n| > 192 gives
// 0 or inf). The scalar form is the same fused operations lane by lane.
inline float expf_v(float x) {
    const float z = fmaf(x, 0x1.715476p+0f, 0x1.8p23f);
    const float n = z - 0x1.8p23f;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (n != n) return n;   // NaN in, NaN out, as the vector form gives (and no NaN -> int conversion)
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return ldexpf(j, (int)n);
}

// silu(x) = x / (1 + exp(-x)), ggml's vector form.
inline float silu(float x) { return x / (1.0f + expf_v(-x)); }

// ggml's 8-lane horizontal sum (hsum_float_8): (a[k] + a[k+4]), then pairs (0,2), (1,3), then both.
inline float hsum8(const float* a) {
    const float r0 = a[4] + a[0], r1 = a[5] + a[1], r2 = a[6] + a[2], r3 = a[7] + a[3];
    return (r0 + r2) + (r1 + r3);
}

// _mm512_reduce_add_ps as GCC expands it: 256-bit halves, then 128-bit halves, then pairs.
inline float reduce16(const float* a) {
    float t[8], s[4];
    for (int i = 0; i < 8; ++i) t[i] = a[i + 8] + a[i];
    for (int i = 0; i < 4; ++i) s[i] = t[i + 4] + t[i];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
inline __m512 expf_v16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    if (!big) return res;
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}
inline __m512 silu16(__m512 x) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), expf_v16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// silu of 8 lanes, bit for bit silu() above, or false when a lane's exponent n leaves
// [-125, 125] (|x| > ~86.6): there the caller takes the scalar path. Inside that range j * 2^n
// is one correctly rounded product with a normal result, which is what ldexpf returns.
inline bool silu8(__m256 x, __m256* out) {
    const __m256 mx = _mm256_sub_ps(_mm256_setzero_ps(), x);
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(mx, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 far = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(125.0f), _CMP_NLE_UQ);
    if (_mm256_movemask_ps(far)) return false;
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), mx));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 pow2n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    *out = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(j, pow2n)));
    return true;
}
#endif

}  // namespace ggml_order
}  // namespace lll
