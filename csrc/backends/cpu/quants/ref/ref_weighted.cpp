// ref_weighted.cpp — importance-weighted quantization of one row (llama-quantize --imatrix) for the
// K-quants Q2_K..Q6_K and the legacy Q4_0, Q4_1, Q5_0, Q5_1: what ggml's quantize_<type>(src, dst,
// nrow, n_per_row, quant_weights) writes when quant_weights is given, byte for byte.
//
// Each column j of the matrix has an importance qw[j] (the imatrix's mean squared activation).
// The error a quant costs is weighted by qw[j] * sqrt(sigma2 + x[j]^2) (sigma2: the mean square
// of the super-block, or of the row for the legacy types; Q6_K uses qw[j] alone), and the scales
// are searched to minimize the weighted squared error: make_qx_quants (symmetric), make_qkx3_quants
// (scale and min), make_qp_quants (the super-block's quantized sub-block scales). Same float
// operations in the same order as ggml, ggml's nearest_int, no FMA contraction (ggml-base is built
// without it), so the bytes are llama-quantize's.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include <algorithm>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/quants/ref/ggml_rounding.h"
#include "backends/cpu/quants/ref/ref_rows.h"

namespace lll {
namespace ref {

namespace {

// Symmetric quants L[i] = l + nmax, l in [-nmax, nmax - 1], weights qw (rmse_type 1); returns the
// scale: the best of 19 candidate inverse scales around -nmax / max by weighted least squares.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
            const float w = qw[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Weighted sums of the quants of x at inverse scale iscale from offset min (make_qkx3's refit).
struct AffineFit {
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
};

// Affine quants L[i] in [0, nmax] with x ~ scale * L + min (min <= 0); returns the scale and
// -min in *the_min: the best of nstep + 1 candidates by weighted squared error (use_mad false).
float make_qkx3_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_mad += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        AffineFit f;
        for (int i = 0; i < n; ++i) {
            const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            f.sum_l += w * l;
            f.sum_l2 += w * l * l;
            f.sum_xl += w * l * x[i];
        }
        const float D = sum_w * f.sum_l2 - f.sum_l * f.sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * f.sum_xl - sum_x * f.sum_l) / D;
        float this_min = (f.sum_l2 * sum_x - f.sum_l * f.sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = f.sum_xl / f.sum_l2;
        }
        float mad = 0;
        for (int i = 0; i < n; ++i) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            diff = diff * diff;
            mad += weights[i] * diff;
        }
        if (mad < best_mad) {
            for (int i = 0; i < n; ++i) L[i] = Laux[i];
            best_mad = mad;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

// The best weighted-squared-error inverse scale of non-negative x among nmax / max and 8
// neighbours (make_qp_quants' first stage).
float qp_best_iscale(int n, int nmax, const float* x, const float* qw, float max, uint8_t* L) {
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    return iscale;
}

}  // namespace

// ggml's make_qp_quants (ref_rows.h): also the i-quants' first fit (ref_iq_quant.cpp).
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];   // ggml's MAX, NaN included
    if (max < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = qp_best_iscale(n, nmax, x, qw, max, L);
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        const float w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

namespace {

// weight[l] = qw[l] * sqrt(sigma2 + x[l]^2): the importance, scaled up where x is large.
inline void importance_weights(int n, const float* x, const float* qw, float sigma2, float* weight) {
    for (int l = 0; l < n; ++l) weight[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
}

inline float sum_squares(const float* x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s;
}

// Q4_K / Q5_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

// Four 2-bit quants per byte: element l of each 32 of a 128 in bits 0-1, l + 32 in 2-3, ...
inline void pack_2bit_groups(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q4_K and Q5_K share everything but the quant range (nmax) and packing: sub-block scales and
// mins by make_qkx3_quants, then quantized to 6 bits by make_qp_quants, the quants re-picked.
// Fills y's d, dmin, scales and returns the quants in L.
template <typename Block>
void kquant_affine_super_block(const float* x, const float* qw, int nmax, bool clamp_scales, Block* y,
                               uint8_t* L) {
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    float weights[32], sw[QK_K / 32], mins[QK_K / 32], scales[QK_K / 32];
    const float sigma2 = 2 * sum_squares(x, QK_K) / QK_K;
    for (int j = 0; j < QK_K / 32; ++j) {
        importance_weights(32, x + 32 * j, qw + 32 * j, sigma2, weights);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
    }
    const float d_block = make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = Ls[j], lm = Lm[j];
        if (clamp_scales) {
            ls = std::min<uint8_t>(63, ls);
            lm = std::min<uint8_t>(63, lm);
        }
        if (j < 4) {
            y->scales[j] = ls;
            y->scales[j + 4] = lm;
        } else {
            y->scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            y->scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            y->scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    y->d = f32_to_fp16(d_block);
    y->dmin = f32_to_fp16(m_block);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, y->scales, &sc, &m);
        const float d = fp16_to_f32(y->d) * sc;
        if (!d) continue;
        const float dm = fp16_to_f32(y->dmin) * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)std::max(0, std::min(nmax, nearest_int((x[32 * j + ii] + dm) / d)));
    }
}

}  // namespace

void quantize_weighted_q2_K(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q2_K(x, dst, n);   // ggml's quantize_q2_K without weights
    block_q2_K* y = static_cast<block_q2_K*>(dst);
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16], weight[16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        const float sigma2 = sum_squares(x, QK_K) / QK_K;
        for (int j = 0; j < QK_K / 16; ++j) {
            importance_weights(16, x + 16 * j, qw + 16 * j, sigma2, weight);
            sw[j] = 0;
            for (int l = 0; l < QK_K / 16; ++l) sw[j] += weight[l];
            scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
        }
        float dm = make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
        float mm = make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
        y[i].d = f32_to_fp16(dm);
        y[i].dmin = f32_to_fp16(mm);
        dm = fp16_to_f32(y[i].d);
        mm = fp16_to_f32(y[i].dmin);
        for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (uint8_t)std::max(0, std::min(3, nearest_int((x[16 * j + ii] + m) / d)));
        }
        pack_2bit_groups(L, y[i].qs);
    }
}

void quantize_weighted_q3_K(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q3_K(x, dst, n);   // ggml's quantize_q3_K without weights
    block_q3_K* y = static_cast<block_q3_K*>(dst);
    int8_t L[QK_K], Ls[QK_K / 16];
    float scales[QK_K / 16], weight[16], sw[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        const float sigma2 = 2 * sum_squares(x, QK_K) / QK_K;
        for (int j = 0; j < QK_K / 16; ++j) {
            importance_weights(16, x + 16 * j, qw + 16 * j, sigma2, weight);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, 12);
        const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QK_K / 16; ++j) {
            int l = Ls[j];
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            l >>= 4;
            y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        y[i].d = f32_to_fp16(d_block);
        for (int j = 0; j < QK_K / 16; ++j) {
            int8_t sc = (int8_t)(j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4);
            sc = (int8_t)((sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
            const float d = fp16_to_f32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(std::max(-4, std::min(3, nearest_int(x[16 * j + ii] / d))) + 4);
        }
        // High bits: the first 32 quants' into bit 0 of hmask[0..31], the next 32 into bit 1, ...
        memset(y[i].hmask, 0, QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QK_K / 8) {
                m = 0;
                hm <<= 1;
            }
        }
        pack_2bit_groups(reinterpret_cast<const uint8_t*>(L), y[i].qs);
    }
}

void quantize_weighted_q4_K(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q4_K(x, dst, n);   // ggml's quantize_q4_K without weights
    block_q4_K* y = static_cast<block_q4_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        kquant_affine_super_block(x, qw, 15, false, &y[i], L);
        uint8_t* q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void quantize_weighted_q5_K(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q5_K(x, dst, n);   // ggml's quantize_q5_K without weights
    block_q5_K* y = static_cast<block_q5_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        kquant_affine_super_block(x, qw, 31, true, &y[i], L);
        uint8_t* qh = y[i].qh;
        uint8_t* ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int nn = 0; nn < QK_K; nn += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[nn + j], l2 = L[nn + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

void quantize_weighted_q6_K(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q6_K(x, dst, n);   // ggml's quantize_q6_K without weights
    block_q6_K* y = static_cast<block_q6_K*>(dst);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, qw += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < kGroupMaxEps) {
            memset(&y[i], 0, sizeof(block_q6_K));
            y[i].d = f32_to_fp16(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = (int8_t)std::min(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(std::max(-32, std::min(31, nearest_int(x[16 * j + ii] / d))) + 32);
        }
        uint8_t* ql = y[i].ql;
        uint8_t* qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

// ---- legacy 32-element blocks: sigma2 is the mean square of the whole row ----

void quantize_weighted_q4_0(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q4_0(x, dst, n);   // ggml's quantize_q4_0 without weights
    block_q4_0* y = static_cast<block_q4_0*>(dst);
    float weight[QK4_0];
    int8_t L[QK4_0];
    const float sigma2 = sum_squares(x, n) / n;
    for (int64_t ib = 0; ib < n / QK4_0; ++ib) {
        const float* xb = x + QK4_0 * ib;
        importance_weights(QK4_0, xb, qw + QK4_0 * ib, sigma2, weight);
        y[ib].d = f32_to_fp16(make_qx_quants(QK4_0, 8, xb, L, weight));
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

void quantize_weighted_q4_1(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q4_1(x, dst, n);   // ggml's quantize_q4_1 without weights
    block_q4_1* y = static_cast<block_q4_1*>(dst);
    float weight[QK4_1];
    uint8_t L[QK4_1], Laux[QK4_1];
    const float sigma2 = sum_squares(x, n) / n;
    for (int64_t ib = 0; ib < n / QK4_1; ++ib) {
        const float* xb = x + QK4_1 * ib;
        importance_weights(QK4_1, xb, qw + QK4_1 * ib, sigma2, weight);
        float min;
        const float d = make_qkx3_quants(QK4_1, 15, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36);
        y[ib].d = f32_to_fp16(d);
        y[ib].m = f32_to_fp16(-min);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

// Q5_0 / Q5_1: low nibbles in qs, 5th bits in qh (bit j: element j).
static void pack_q5(const uint8_t* L, uint8_t* qs, uint8_t* qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const uint8_t xi0 = L[j], xi1 = L[j + 16];
        qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_bytes, &qh, sizeof(qh));
}

void quantize_weighted_q5_0(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q5_0(x, dst, n);   // ggml's quantize_q5_0 without weights
    block_q5_0* y = static_cast<block_q5_0*>(dst);
    float weight[QK5_0];
    int8_t L[QK5_0];
    const float sigma2 = sum_squares(x, n) / n;
    for (int64_t ib = 0; ib < n / QK5_0; ++ib) {
        const float* xb = x + QK5_0 * ib;
        importance_weights(QK5_0, xb, qw + QK5_0 * ib, sigma2, weight);
        y[ib].d = f32_to_fp16(make_qx_quants(QK5_0, 16, xb, L, weight));
        pack_q5(reinterpret_cast<const uint8_t*>(L), y[ib].qs, y[ib].qh);
    }
}

void quantize_weighted_q5_1(const float* x, void* dst, int64_t n, const float* qw) {
    if (!qw) return quantize_q5_1(x, dst, n);   // ggml's quantize_q5_1 without weights
    block_q5_1* y = static_cast<block_q5_1*>(dst);
    float weight[QK5_1];
    uint8_t L[QK5_1], Laux[QK5_1];
    const float sigma2 = sum_squares(x, n) / n;
    for (int64_t ib = 0; ib < n / QK5_1; ++ib) {
        const float* xb = x + QK5_1 * ib;
        importance_weights(QK5_1, xb, qw + QK5_1 * ib, sigma2, weight);
        float min;
        const float d = make_qkx3_quants(QK5_1, 31, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36);
        y[ib].d = f32_to_fp16(d);
        y[ib].m = f32_to_fp16(-min);
        pack_q5(L, y[ib].qs, y[ib].qh);
    }
}

}  // namespace ref
}  // namespace lll
