// ref_iquants.cpp — reference conversions for the 4-bit non-linear formats IQ4_NL (blocks of 32)
// and IQ4_XS (super-blocks of 256 with 6-bit sub-block scales).
//
// The quantizers reproduce what llama-quantize writes for these types without an imatrix
// (ggml's quantize_iq4_nl / quantize_iq4_xs with no quant weights, i.e. quantize_row_iq4_nl_impl
// with ntry = 7): per 32 elements, importance weights x^2, a first scale max / kvalues[0], then
// 15 more candidate scales around it, each quant the nearest grid value, the scale refit by
// weighted least squares; IQ4_XS then quantizes the sub-block scales to 6 bits against a
// super-block scale and re-picks the quants. Same float operations in the same order, ggml's
// nearest_int, no FMA contraction (ggml-base is built without it).
//
// (ggml's quantize_row_iq4_nl_ref runs the same search with ntry = -1, a cruder single-scale
// fit; llama-quantize and ggml_quantize_chunk do not use it, so neither do we.)
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

constexpr int kTries = 7;                // llama-quantize's ntry: scales tried on each side

// Index of the grid value nearest to x (ties to the lower one), ggml's best_index_int8.
inline int best_index(float x) {
    const int8_t* val = kvalues_iq4nl;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// Weighted least-squares sums of the grid quants chosen for xb * id.
inline void fit_sums(const float* xb, const float* weight, float id, float* sumqx, float* sumq2,
                     uint8_t* Lb) {
    float sx = 0, s2 = 0;
    for (int j = 0; j < 32; ++j) {
        const int l = best_index(id * xb[j]);
        if (Lb) Lb[j] = (uint8_t)l;
        const float q = kvalues_iq4nl[l];
        const float w = weight[j];
        sx += w * q * xb[j];
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

// The scale of one block of 32 (0 for an all-zero block), its quants in Lb: the first fit at
// max / kvalues[0], then the best of 2 * kTries + 1 scales around it, each judged by the squared
// error weighted by `weight`.
float block_scale(const float* xb, const float* weight, uint8_t* Lb) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        const float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < kGroupMaxEps) return 0.0f;
    const float values0 = kvalues_iq4nl[0];
    float d = -max / values0;
    float sumqx, sumq2;
    fit_sums(xb, weight, 1 / d, &sumqx, &sumq2, Lb);
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -kTries; itry <= kTries; ++itry) {
        const float id = (float)(itry + kvalues_iq4nl[0]) / max;
        fit_sums(xb, weight, id, &sumqx, &sumq2, nullptr);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Nibbles: element j of each 32 in the low half of qs[16 i + j], element 16 + j in the high half.
void pack_nibbles(const uint8_t* L, uint8_t* qs, int n) {
    for (int i = 0; i < n / 32; ++i)
        for (int j = 0; j < 16; ++j) qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

// The error weights of a block of 32: x^2 without an imatrix; with one (qw), the importance
// scaled up where x is large, qw[j] * sqrt(sigma2 + x[j]^2), sigma2 twice the super-block's
// mean square (ggml's quantize_row_iq4_nl_impl).
void block_weights(const float* xb, const float* qw, float sigma2, float* weight) {
    if (qw) {
        for (int j = 0; j < 32; ++j) weight[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
    } else {
        for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    }
}

// sigma2 of a super-block of n: the sum of squares times 2 / n, as ggml rounds it.
float super_block_sigma2(const float* x, int n) {
    float sigma2 = 0;
    for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / n;
    return sigma2;
}

void iq4_nl_row(const float* src, void* dst, int64_t k, const float* qw) {
    block_iq4_nl* y = static_cast<block_iq4_nl*>(dst);
    for (int64_t i = 0; i < k / QK4_NL; ++i) {
        const float* x = src + i * QK4_NL;
        uint8_t L[QK4_NL];
        float weight[QK4_NL];
        block_weights(x, qw ? qw + i * QK4_NL : nullptr, qw ? super_block_sigma2(x, QK4_NL) : 0.f, weight);
        const float d = block_scale(x, weight, L);
        y[i].d = f32_to_fp16(d);
        // The quants again against the final scale (the search keeps only the scale).
        const float id = d ? 1 / d : 0;
        for (int j = 0; j < QK4_NL; ++j) L[j] = (uint8_t)best_index(id * x[j]);
        pack_nibbles(L, y[i].qs, QK4_NL);
    }
}

void iq4_xs_row(const float* src, void* dst, int64_t k, const float* qw) {
    block_iq4_xs* y = static_cast<block_iq4_xs*>(dst);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float* x = src + i * QK_K;
        const float* qwb = qw ? qw + i * QK_K : nullptr;
        const float sigma2 = qw ? super_block_sigma2(x, QK_K) : 0.f;
        uint8_t L[QK_K];
        float scales[QK_K / 32], weight[32];
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            block_weights(x + 32 * ib, qwb ? qwb + 32 * ib : nullptr, sigma2, weight);
            scales[ib] = block_scale(x + 32 * ib, weight, L + 32 * ib);
            const float abs_d = fabsf(scales[ib]);
            if (abs_d > amax_scale) {
                amax_scale = abs_d;
                max_scale = scales[ib];
            }
        }
        // Sub-block scales as 6-bit multiples of d = -max_scale / 32, quants re-picked for them.
        const float d = -max_scale / 32;
        y[i].d = f32_to_fp16(d);
        y[i].scales_h = 0;
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
            const float dl = d * (float)l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = (uint8_t)best_index(idl * x[32 * ib + j]);
            const int biased = l + 32;
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = (uint8_t)(biased & 0x0F);
            else y[i].scales_l[ib / 2] |= (uint8_t)((biased & 0x0F) << 4);
            y[i].scales_h |= (uint16_t)((biased >> 4) << 2 * (ib % 8));
        }
        pack_nibbles(L, y[i].qs, QK_K);
    }
}

}  // namespace

void dequantize_iq4_nl(const void* src, float* dst, int64_t k) {
    const block_iq4_nl* x = static_cast<const block_iq4_nl*>(src);
    for (int64_t i = 0; i < k / QK4_NL; ++i) {
        const float d = fp16_to_f32(x[i].d);
        float* y = dst + i * QK4_NL;
        for (int j = 0; j < QK4_NL / 2; ++j) {
            y[j] = d * kvalues_iq4nl[x[i].qs[j] & 0x0F];
            y[j + QK4_NL / 2] = d * kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void dequantize_iq4_xs(const void* src, float* dst, int64_t k) {
    const block_iq4_xs* x = static_cast<const block_iq4_xs*>(src);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0x0F) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t* qs = x[i].qs + 16 * ib;
            float* y = dst + i * QK_K + 32 * ib;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * kvalues_iq4nl[qs[j] & 0x0F];
                y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void quantize_iq4_nl(const float* src, void* dst, int64_t k) { iq4_nl_row(src, dst, k, nullptr); }
void quantize_iq4_xs(const float* src, void* dst, int64_t k) { iq4_xs_row(src, dst, k, nullptr); }
void quantize_weighted_iq4_nl(const float* src, void* dst, int64_t k, const float* qw) { iq4_nl_row(src, dst, k, qw); }
void quantize_weighted_iq4_xs(const float* src, void* dst, int64_t k, const float* qw) { iq4_xs_row(src, dst, k, qw); }

}  // namespace ref
}  // namespace lll
