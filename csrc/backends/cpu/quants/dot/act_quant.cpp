// act_quant.cpp — activation rows -> the vec_dot_type of a weight (Q8_0, Q8_1, Q8_K, F16, BF16,
// F32), as ggml's CPU backend does it on x86.
//
// ggml's x86 quantize_row_q8_0 / q8_1 differ from the reference (quantize_row_q8_0_ref): the
// inverse scale is 127 / amax (not 1 / d) and values are rounded half-to-even (vroundps), not
// half-away-from-zero. Q8_K uses the reference algorithm on x86 (scale -127 / max, where max is
// the first element of largest magnitude, rounding half-to-even through nearest_int). The scalar
// code here reproduces exactly those semantics, and every SIMD level writes the same bytes.
#include <math.h>
#include <string.h>

#include <stdexcept>
#include <string>

#include "common/fp16.h"
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX2
#include <immintrin.h>
#endif

namespace lll {
namespace kern {

namespace {

// float -> int32 as cvtps2dq does under round-to-nearest-even: out-of-range and NaN give INT32_MIN.
inline int32_t cvt_f32_i32_rne(float v) {
    if (!(fabsf(v) < 2147483648.0f)) return INT32_MIN;
    return (int32_t)nearbyintf(v);
}

// int32 -> int8 with signed saturation (packssdw + packsswb).
inline int8_t sat_i8(int32_t v) { return (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v)); }

// One Q8_0 / Q8_1 block (32 values): returns d (f32), writes qs, and the int sum of the quants.
inline float q8_block_scalar(const float* x, int8_t* qs, int32_t* sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    uint32_t s = 0;   // wraps like the SIMD int32 adds
    for (int j = 0; j < 32; ++j) {
        const int32_t v = cvt_f32_i32_rne(x[j] * id);
        s += (uint32_t)v;
        qs[j] = sat_i8(v);
    }
    *sum = (int32_t)s;
    return d;
}

void q8_0_scalar(const float* x, block_q8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        int32_t sum;
        y[i].d = f32_to_fp16(q8_block_scalar(x + i * 32, y[i].qs, &sum));
    }
}

void q8_1_scalar(const float* x, block_q8_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        int32_t sum;
        const float d = q8_block_scalar(x + i * 32, y[i].qs, &sum);
        y[i].d = f32_to_fp16(d);
        y[i].s = f32_to_fp16(d * (float)sum);
    }
}

// Q8_K: the block's max-magnitude element (first one on ties) maps to -127.
void q8_K_scalar(const float* x, block_q8_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int32_t v = cvt_f32_i32_rne(iscale * x[j]);
            y[i].qs[j] = sat_i8(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += y[i].qs[g * 16 + j];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

}  // namespace

// The scalar quantizers, one per activation type (the registry's act_quant[Scalar]).
void act::scalar_q8_0(const float* x, void* dst, int64_t n) { q8_0_scalar(x, (block_q8_0*)dst, n / QK8_0); }
void act::scalar_q8_1(const float* x, void* dst, int64_t n) { q8_1_scalar(x, (block_q8_1*)dst, n / QK8_1); }
void act::scalar_q8_K(const float* x, void* dst, int64_t n) { q8_K_scalar(x, (block_q8_K*)dst, n / QK_K); }
void act::scalar_f32(const float* x, void* dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }
void act::scalar_f16(const float* x, void* dst, int64_t n) {
    fp16_t* y = (fp16_t*)dst;
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
void act::scalar_bf16(const float* x, void* dst, int64_t n) {
    bf16_t* y = (bf16_t*)dst;
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// ------------------------------------------------------------------------------------------
// AVX2: Q8_0 / Q8_1 / Q8_K / F16 (BF16 and F32 use the scalar code).
// ------------------------------------------------------------------------------------------
#if LLL_BUILD_AVX2
namespace {

// 32 floats -> 32 int8 in y_qs; returns d and the int32 sum of the quants (before saturation).
inline float q8_block_avx2(const float* x, int8_t* y_qs, int32_t* sum) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
    m = _mm256_max_ps(m, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    // cvtps2dq rounds half-to-even under the default MXCSR, like vroundps(NEAREST) + cvt.
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, id));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, id));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, id));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, id));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum = _mm_cvtsi128_si32(s4);
    i0 = _mm256_packs_epi32(i0, i1);   // lanes: 0-3 8-11 | 4-7 12-15
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);   // 128-bit lanes interleaved; fix the order below
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i*)y_qs, i0);
    return d;
}

// Q8_K as q8_K_scalar: the first element of largest magnitude maps to -127. NaNs are skipped in
// the max as the scalar's `>` skips them (vmaxps returns its second operand on NaN).
void q8_K_avx2(const float* x, block_q8_K* y, int64_t nb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        float max = 0.0f;
        const __m256 target = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), target, _CMP_EQ_OQ));
            if (hit) { max = x[j + __builtin_ctz(hit)]; break; }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i hi = _mm256_set1_epi32(127), lo = _mm256_set1_epi32(-128);
        for (int g = 0; g < QK_K / 16; ++g) {
            __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + g * 16)));
            __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + g * 16 + 8)));
            q0 = _mm256_max_epi32(_mm256_min_epi32(q0, hi), lo);
            q1 = _mm256_max_epi32(_mm256_min_epi32(q1, hi), lo);
            const __m256i s = _mm256_add_epi32(q0, q1);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
            y[i].bsums[g] = (int16_t)_mm_cvtsi128_si32(s4);
            const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);   // 16 x int16 in order
            _mm_storeu_si128((__m128i*)(y[i].qs + g * 16),
                             _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
        }
        y[i].d = 1.0f / iscale;
    }
}

}  // namespace

// The AVX2 quantizers (the registry's act_quant[AVX2]; BF16 and F32 use the scalar code).
void act::avx2_q8_K(const float* x, void* dst, int64_t n) { q8_K_avx2(x, (block_q8_K*)dst, n / QK_K); }
void act::avx2_q8_0(const float* x, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int32_t sum;
        y[i].d = f32_to_fp16(q8_block_avx2(x + i * 32, y[i].qs, &sum));
    }
}
void act::avx2_q8_1(const float* x, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int32_t sum;
        const float d = q8_block_avx2(x + i * 32, y[i].qs, &sum);
        y[i].d = f32_to_fp16(d);
        y[i].s = f32_to_fp16(d * (float)sum);
    }
}
void act::avx2_f16(const float* x, void* dst, int64_t n) {
    fp16_t* y = (fp16_t*)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
#endif

// ------------------------------------------------------------------------------------------
// AVX-512: Q8_0 / Q8_1 / Q8_K / F16 / BF16.
// ------------------------------------------------------------------------------------------
#if LLL_BUILD_AVX512
namespace {

inline float q8_block_avx512(const float* x, int8_t* y_qs, int32_t* sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.f;
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    _mm_storeu_si128((__m128i*)y_qs, _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128((__m128i*)(y_qs + 16), _mm512_cvtsepi32_epi8(i1));
    return d;
}

// Lane b of the result = op over the 16 lanes of v[b] (v is clobbered): 16 reductions in four
// rounds of paired shuffles, 45 shuffles and ops against 16 x 8 for reducing each vector alone.
// After the rounds lane 4k + j holds vector k + 4j; the final permute puts vector b in lane b.
template <class Op>
inline __m512 reduce16(__m512* v, Op op) {
    for (int i = 0; i < 8; ++i)   // 128-bit quarters: lanes 0-7 vector 2i, 8-15 vector 2i + 1
        v[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)   // quarter k: vector 4i + k
        v[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; ++i)   // quarter k: vectors 8i + k, 8i + k + 4, two lanes each
        v[i] = op(_mm512_shuffle_ps(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_ps(v[2 * i], v[2 * i + 1], 0xEE));
    const __m512 z = op(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

// reduce16's ops: lane-wise max of floats, lane-wise sum of int32 (carried in float vectors).
inline __m512 max_f32(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
inline __m512 add_i32(__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// 16 consecutive Q8_0 / Q8_1 blocks: q8_block_avx512's values block by block (the same amax,
// d = amax / 127, quants and sums; both roundings to F16 are IEEE round-to-nearest-even, as
// f32_to_fp16), with the per-block horizontal reductions and F16 conversions done 16 at a time.
template <class Block, bool kSum>
void q8_blocks16_avx512(const float* x, Block* y) {
    __m512 m[16];
    for (int b = 0; b < 16; ++b)
        m[b] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 32 * b)), _mm512_abs_ps(_mm512_loadu_ps(x + 32 * b + 16)));
    const __m512 amax = reduce16(m, max_f32);
    const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.f));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    alignas(64) float id[16];
    _mm512_store_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.f), amax));
    __m512 sums[16];
    for (int b = 0; b < 16; ++b) {
        const __m512 ib = _mm512_set1_ps(id[b]);
        const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), ib));
        const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), ib));
        _mm_storeu_si128((__m128i*)y[b].qs, _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i*)(y[b].qs + 16), _mm512_cvtsepi32_epi8(i1));
        if constexpr (kSum) sums[b] = _mm512_castsi512_ps(_mm512_add_epi32(i0, i1));
    }
    alignas(32) fp16_t dh[16], sh[16];
    _mm256_store_si256((__m256i*)dh, _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if constexpr (kSum) {
        const __m512i sum = _mm512_castps_si512(reduce16(sums, add_i32));
        const __m512 s = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum));
        _mm256_store_si256((__m256i*)sh, _mm512_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (int b = 0; b < 16; ++b) {
        y[b].d = dh[b];
        if constexpr (kSum) y[b].s = sh[b];
    }
}

void q8_K_avx512(const float* x, block_q8_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        __m512 amax_v = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16) amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(amax_v);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        // The signed value of the first element whose magnitude is amax (as the scalar scan).
        float max = 0.0f;
        const __m512 target = _mm512_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 16) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), target, _CMP_EQ_OQ);
            if (hit) { max = x[j + __builtin_ctz(hit)]; break; }
        }
        const float iscale = -127.f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        const __m512i lim = _mm512_set1_epi32(127);
        __m512 q16[QK_K / 16];   // the 16 groups' quants as int32, for reduce16
        for (int g = 0; g < QK_K / 16; ++g) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + g * 16)));
            q = _mm512_max_epi32(_mm512_min_epi32(q, lim), _mm512_set1_epi32(-128));
            _mm_storeu_si128((__m128i*)(y[i].qs + g * 16), _mm512_cvtsepi32_epi8(q));
            q16[g] = _mm512_castsi512_ps(q);
        }
        const __m512i bsums = _mm512_castps_si512(reduce16(q16, add_i32));
        _mm256_storeu_si256((__m256i*)y[i].bsums, _mm512_cvtepi32_epi16(bsums));   // (int16_t) of each sum
        y[i].d = 1.0f / iscale;
    }
}

// f32 -> bf16 exactly as f32_to_bf16 (NaN made quiet, otherwise round-to-nearest-even).
// vcvtneps2bf16 is not used: it flushes subnormal inputs to zero.
inline __m256i bf16_from_f32x16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(_mm512_srli_epi32(u, 16), one))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

}  // namespace

// The AVX-512 quantizers (the registry's act_quant[AVX512]; F32 uses the scalar code).
void act::avx512_q8_0(const float* x, void* dst, int64_t n) {
    block_q8_0* y = (block_q8_0*)dst;
    int64_t i = 0;
    for (; i + 16 <= n / QK8_0; i += 16) q8_blocks16_avx512<block_q8_0, false>(x + i * 32, y + i);
    for (; i < n / QK8_0; ++i) {
        int32_t sum;
        y[i].d = f32_to_fp16(q8_block_avx512(x + i * 32, y[i].qs, &sum));
    }
}
void act::avx512_q8_1(const float* x, void* dst, int64_t n) {
    block_q8_1* y = (block_q8_1*)dst;
    int64_t i = 0;
    for (; i + 16 <= n / QK8_1; i += 16) q8_blocks16_avx512<block_q8_1, true>(x + i * 32, y + i);
    for (; i < n / QK8_1; ++i) {
        int32_t sum;
        const float d = q8_block_avx512(x + i * 32, y[i].qs, &sum);
        y[i].d = f32_to_fp16(d);
        y[i].s = f32_to_fp16(d * (float)sum);
    }
}
void act::avx512_q8_K(const float* x, void* dst, int64_t n) { q8_K_avx512(x, (block_q8_K*)dst, n / QK_K); }
void act::avx512_f16(const float* x, void* dst, int64_t n) {
    fp16_t* y = (fp16_t*)dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i*)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
void act::avx512_bf16(const float* x, void* dst, int64_t n) {
    bf16_t* y = (bf16_t*)dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i*)(y + i), bf16_from_f32x16(_mm512_loadu_ps(x + i)));
    for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}
#endif

}  // namespace kern

void quantize_act_row(GGMLType vec_dot_type, const float* x, void* dst, int64_t n, Isa isa) {
    const TypeTraits* tt = type_traits(vec_dot_type);
    if (!tt) throw std::invalid_argument("quantize_act_row: unknown activation type");
    if (n < 0 || n % tt->block_elems != 0)
        throw std::invalid_argument(std::string("quantize_act_row: n = ") + std::to_string(n) +
                                    " is not a multiple of the " + tt->name + " block size " +
                                    std::to_string(tt->block_elems));
    if (!isa_available(isa))
        throw std::invalid_argument(std::string("quantize_act_row: ISA level ") + isa_name(isa) +
                                    " is not available on this CPU/build");
    // The quantizer written for this level, else the nearest below (the registry's act_quant[]).
    for (int level = static_cast<int>(isa); level >= 0; --level) {
        if (tt->act_quant[level]) {
            tt->act_quant[level](x, dst, n);
            return;
        }
    }
    throw std::invalid_argument(std::string("quantize_act_row: unsupported activation type ") + tt->name);
}

}  // namespace lll
