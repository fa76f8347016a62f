// ops.cpp — see ops.h. Mostly scalar code (these ops are a few percent of a step; matmul
// dominates); RMSNorm, SwiGLU and GEGLU have AVX-512 paths held bit-exact to their scalar loops.
#include "backends/cpu/ops.h"
#include "backends/cpu/ggml_numerics/ggml_math.h"
#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>
#endif
#include <math.h>
#include <algorithm>
#include <string.h>
#include <stdexcept>
#include <string>
#include <vector>
#include "backends/cpu/exp_approx.h"
#include "common/fp16.h"
#include "backends/cpu/quants/quants.h"

namespace lll {

// Sum of squares in double as ggml does it (each square rounded to float, then added in double),
// in 16 lanes (lane = i % 16, halves added pairwise 16 -> 8 -> 4 -> 2 -> 1), then the tail in
// order: the scalar loop is the reference of the AVX-512 one, bit for bit. Against ggml's one
// sequential double sum, the order moves the double result by ulps of a double, which reach the
// float mean only when it lies within 2^-29 of a rounding boundary.
static double sum_lanes16(double* lanes) {
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; ++i) lanes[i] = lanes[i] + lanes[i + w];
    return lanes[0];
}

static double sum_squares(const float* x, int64_t n, bool simd) {
    double lanes[16] = {0};
    int64_t i = 0;
#if defined(__AVX512F__)
    if (simd) {
        __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_loadu_ps(x + i);
            const __m512 sq = _mm512_mul_ps(v, v);
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
        }
        _mm512_storeu_pd(lanes, lo);
        _mm512_storeu_pd(lanes + 8, hi);
    }
#endif
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) lanes[j] += (double)(x[i + j] * x[i + j]);
    double sum = sum_lanes16(lanes);
    for (; i < n; ++i) sum += (double)(x[i] * x[i]);
    return sum;
}

static void rms_norm_impl(const float* x, const float* w, float* y, int64_t n, float eps, bool simd) {
    const float mean = (float)(sum_squares(x, n, simd) / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    int64_t i = 0;
#if defined(__AVX512F__)
    if (simd) {
        const __m512 sc = _mm512_set1_ps(scale);
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), sc);
            _mm512_storeu_ps(y + i, w ? _mm512_mul_ps(v, _mm512_loadu_ps(w + i)) : v);
        }
    }
#endif
    for (; i < n; ++i) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    rms_norm_impl(x, w, y, n, eps, true);
}

void rms_norm_reference(const float* x, const float* w, float* y, int64_t n, float eps) {
    rms_norm_impl(x, w, y, n, eps, false);
}

void parallel_rows(ThreadPool& pool, int64_t rows, int64_t cost_per_row,
                   const std::function<void(int64_t r0, int64_t r1)>& fn) {
    constexpr int64_t kSerialCost = 1 << 16;     // below this, a hand-off costs more than it saves
    if (rows <= 1 || pool.size() == 1 || rows * cost_per_row < kSerialCost) {
        fn(0, rows);
        return;
    }
    pool.run([&](int ith, int nth) {
        const int64_t per = (rows + nth - 1) / nth;
        const int64_t r0 = std::min<int64_t>(rows, ith * per), r1 = std::min<int64_t>(rows, r0 + per);
        if (r0 < r1) fn(r0, r1);
    });
}

void rms_norm_rows(ThreadPool& pool, const float* x, const float* w, float* y, int64_t rows, int64_t n,
                   float eps) {
    parallel_rows(pool, rows, n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) rms_norm(x + r * n, w, y + r * n, n, eps);
    });
}

void rope_table(const int32_t* positions, int64_t T, int rope_dims, const RopeFreqs& f, float* cs) {
    const float theta_scale = powf(f.base, -2.0f / (float)rope_dims);
    float corr[2] = {0.0f, 0.0f};
    if (f.scaling.ext_factor != 0.0f) rope_yarn_corr_dims(rope_dims, f.base, f.scaling, corr);
    for (int64_t t = 0; t < T; ++t)
        rope_table_row((float)positions[t], rope_dims, theta_scale, f.scaling, corr, f.freq_factors,
                       cs + t * rope_dims);
}

void rope(ThreadPool& pool, float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const float* cs_all,
          RopeStyle style) {
    parallel_rows(pool, T, (int64_t)n_heads * head_dim * 4, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* cs = cs_all + t * rope_dims;
            for (int h = 0; h < n_heads; ++h) {
                float* v = x + (t * n_heads + h) * (int64_t)head_dim;
                const int half = rope_dims / 2;
                for (int i0 = 0; i0 < rope_dims; i0 += 2) {
                    const float c = cs[i0], s = cs[i0 + 1];
                    // Normal: rotate (v[i0], v[i0+1]); NeoX: rotate (v[i], v[i + rope_dims/2]).
                    const int a = style == RopeStyle::Normal ? i0 : i0 / 2;
                    const int b = style == RopeStyle::Normal ? i0 + 1 : i0 / 2 + half;
                    const float x0 = v[a], x1 = v[b];
                    // ggml's compiled rope fuses the first product of each line into an FMA.
                    v[a] = fmaf(x0, c, -(x1 * s));
                    v[b] = fmaf(x0, s, x1 * c);
                }
            }
        }
    });
}

// out = silu(gate) * up with silu(g) = g / (1 + exp(-g)) in ggml's own vector form (ggml_math.h:
// its expf polynomial, then one division), so the result is llama.cpp's to the bit. The scalar
// reference, from element i0 on; the AVX-512 loop does the same operations 16 lanes at a time.
static void swiglu_scalar(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = ggml_order::silu(gate[i]) * up[i];
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
static int64_t swiglu_avx512(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(ggml_order::silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
    return i;
}
#elif defined(__AVX2__) && defined(__FMA__)   // as swiglu() dispatches: one of the two is compiled
static int64_t swiglu_avx2(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        __m256 s;
        if (ggml_order::silu8(_mm256_loadu_ps(gate + i), &s)) _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
        else swiglu_scalar(gate, up, out, i, i + 8);
    }
    return i;
}
#endif

void swiglu(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n) {
    parallel_rows(pool, n, 4, [&](int64_t i0, int64_t i1) {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
        i0 = swiglu_avx512(gate, up, out, i0, i1);
#elif defined(__AVX2__) && defined(__FMA__)
        i0 = swiglu_avx2(gate, up, out, i0, i1);
#endif
        swiglu_scalar(gate, up, out, i0, i1);
    });
}

void swiglu_reference(const float* gate, const float* up, float* out, int64_t n) {
    swiglu_scalar(gate, up, out, 0, n);
}

static float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

// GELU of every f16 value, rounded to f16: ggml evaluates GELU through this table. One spare
// entry: the SIMD path gathers 32 bits per lookup (the entry and its successor).
static const std::vector<fp16_t>& gelu_table() {
    static const std::vector<fp16_t> table = [] {
        std::vector<fp16_t> t((1 << 16) + 1, 0);
        for (uint32_t i = 0; i < (1u << 16); ++i) t[i] = f32_to_fp16(gelu_tanh(fp16_to_f32((fp16_t)i)));
        return t;
    }();
    return table;
}

// out = gelu(gate) * up: the scalar reference, from element i0 on.
static void geglu_scalar(const fp16_t* table, const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
        const float g = gate[i];
        if (g <= -10.0f) out[i] = 0.0f;
        else if (g >= 10.0f) out[i] = g * up[i];
        else out[i] = fp16_to_f32(table[f32_to_fp16(g)]) * up[i];
    }
}

#if defined(__AVX512F__) && defined(__F16C__)
// 16 at a time: hardware f32 -> f16 (round to nearest even, as f32_to_fp16), a gather from the
// table, the same product and the same clamps: identical to geglu_scalar.
static int64_t geglu_avx512(const fp16_t* table, const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i), u = _mm512_loadu_ps(up + i);
        const __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m512i t = _mm512_i32gather_epi32(idx, (const void*)table, 2);
        __m512 r = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(t)), u);
        r = _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(g, _mm512_set1_ps(10.0f), _CMP_GE_OQ), g, u);
        r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(g, _mm512_set1_ps(-10.0f), _CMP_LE_OQ), _mm512_setzero_ps());
        _mm512_storeu_ps(out + i, r);
    }
    return i;
}
#endif

void geglu(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n) {
    const fp16_t* table = gelu_table().data();
    parallel_rows(pool, n, 4, [&](int64_t i0, int64_t i1) {
#if defined(__AVX512F__) && defined(__F16C__)
        i0 = geglu_avx512(table, gate, up, out, i0, i1);
#endif
        geglu_scalar(table, gate, up, out, i0, i1);
    });
}

void geglu_reference(const float* gate, const float* up, float* out, int64_t n) {
    geglu_scalar(gelu_table().data(), gate, up, out, 0, n);
}

void add_inplace(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias_rows(float* rows, const float* bias, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) add_inplace(rows + r * n, bias, n);
}

void scale_inplace(float* y, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void embed_tokens(const WeightRef& tok_embd, const int32_t* tokens, int64_t T, float* out) {
    for (int64_t t = 0; t < T; ++t) {
        const int32_t id = tokens[t];
        if (id < 0 || id >= tok_embd.ne1)
            throw std::out_of_range("token id " + std::to_string(id) + " out of range [0, " +
                                    std::to_string(tok_embd.ne1) + ")");
        dequantize_row(tok_embd.type, tok_embd.row(id), out + t * tok_embd.ne0, tok_embd.ne0);
    }
}

void layer_norm_rows(ThreadPool& pool, const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t n, float eps) {
    parallel_rows(pool, rows, n * 3, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * n;
            float* yr = y + r * n;
            double sum = 0.0;
            for (int64_t i = 0; i < n; ++i) sum += xr[i];
            const float mean = (float)(sum / (double)n);
            double sq = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const float d = xr[i] - mean;
                sq += (double)(d * d);
            }
            const float inv = 1.0f / sqrtf((float)(sq / (double)n) + eps);
            for (int64_t i = 0; i < n; ++i) {
                const float v = (xr[i] - mean) * inv;
                yr[i] = v * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
            }
        }
    });
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7, under float's rounding of
// the GELU that uses it), its exp(-z^2) through exp_approx.h: a third of libm's erff's time,
// which was a tenth of a MiniLM forward. Written with explicit fused multiply-adds so the 8-lane
// form below is bit-identical (a value's GELU does not depend on where it sits in the batch).
constexpr float kErfP = 0.3275911f;
constexpr float kErfA[5] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f};

static inline float gelu_erf1(float x) {
    const float v = x * 0.70710678118654752f;
    const float z = fabsf(v);
    const float t = 1.0f / fmaf(kErfP, z, 1.0f);
    float poly = kErfA[0];
    for (int i = 1; i < 5; ++i) poly = fmaf(poly, t, kErfA[i]);
    poly = poly * t;
    const float e = fmaf(-poly, exp_nonpositive(-(z * z)), 1.0f);
    const float h = 0.5f * x;
    return h * (1.0f + (v < 0.0f ? -e : e));
}

#if defined(__AVX2__) && defined(__FMA__)
// 8 lanes of gelu_erf1 (same operations): the scalar loop took a tenth of a MiniLM forward.
static inline __m256 gelu_erf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 v = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
    const __m256 z = _mm256_andnot_ps(sign, v);
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(kErfP), z, _mm256_set1_ps(1.0f)));
    __m256 poly = _mm256_set1_ps(kErfA[0]);
    for (int i = 1; i < 5; ++i) poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(kErfA[i]));
    poly = _mm256_mul_ps(poly, t);
    const __m256 ex = exp_nonpositive8(_mm256_xor_ps(sign, _mm256_mul_ps(z, z)));
    const __m256 e = _mm256_fnmadd_ps(poly, ex, _mm256_set1_ps(1.0f));
    const __m256 se = _mm256_blendv_ps(e, _mm256_xor_ps(sign, e), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256 h = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
    return _mm256_mul_ps(h, _mm256_add_ps(_mm256_set1_ps(1.0f), se));
}
#endif

void gelu_erf(ThreadPool& pool, float* x, int64_t n) {
    constexpr int64_t kRow = 4096;
    parallel_rows(pool, (n + kRow - 1) / kRow, kRow * 8, [&](int64_t r0, int64_t r1) {
        const int64_t i1 = std::min(n, r1 * kRow);
        int64_t i = r0 * kRow;
#if defined(__AVX2__) && defined(__FMA__)
        for (; i + 8 <= i1; i += 8) _mm256_storeu_ps(x + i, gelu_erf8(_mm256_loadu_ps(x + i)));
#endif
        for (; i < i1; ++i) x[i] = gelu_erf1(x[i]);
    });
}

void gelu_erf_reference(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = gelu_erf1(x[i]);
}

}  // namespace lll
