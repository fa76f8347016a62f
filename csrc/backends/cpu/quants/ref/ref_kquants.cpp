// ref_kquants.cpp — reference conversions for the K-quants (Q2_K..Q6_K, Q8_K), 256-element
// super-blocks.
//
// The quantizers reproduce ggml's quantize_row_*_ref (what llama-quantize runs without an
// imatrix) bit for bit: the same scale searches (make_qx_quants, make_q3_quants,
// make_qkx2_quants), the same float operations in the same order, ggml's nearest_int rounding
// trick and its integer narrowing casts. FMA contraction is off because ggml-base is built
// without it; a fused multiply-add would change the chosen scales and so the bytes.
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

inline int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// ---------------------------------------------------------------- scale searches

// Symmetric quants L in [0, 2*nmax) for x ≈ scale * (L - nmax), weights w = x^2 (ggml's
// make_qx_quants with rmse_type 1 and no imatrix, the only form the reference quantizers use).
// Tries 18 scales around nmax/max and keeps the one with the best weighted least-squares fit.
float make_qx_quants_sq(int n, int nmax, const float* x, int8_t* L) {
    float max = 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = 0.0f;
        suml2 = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                L[i] = (int8_t)(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q3_K's search (ggml's make_q3_quants with do_rmse): start from nmax/max, then up to 5 rounds
// of moving single quants when that improves the x^2-weighted fit. L in [0, 2*nmax).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0.0f) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Affine quants x ≈ scale * L - the_min, L in [0, nmax] (ggml's make_qkx2_quants): a first
// guess from the range, then nstep+1 candidate scales, each refit by weighted least squares for
// (scale, min) and kept when its weighted error (|.| if use_mad, else squared) is lower.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clamp_int(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// ---------------------------------------------------------------- scale packing helpers

// Q4_K / Q5_K: 8 pairs of 6-bit (scale, min) in 12 bytes. Bytes 0-3: scales 0-3 (+ high bits
// of scales 4-7 in bits 6-7); bytes 4-7: mins 0-3 (+ high bits of mins 4-7); bytes 8-11:
// low nibbles of scale/min 4-7.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

// Writes 6-bit scale ls and min lm of sub-block j; j must go 0..7 in order (j >= 4 ORs into
// bytes written for j < 4).
inline void set_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
    if (j < 4) {
        q[j] = ls;
        q[j + 4] = lm;
    } else {
        q[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        q[j - 4] |= (uint8_t)((ls >> 4) << 6);
        q[j - 0] |= (uint8_t)((lm >> 4) << 6);
    }
}

// Q3_K: the 6-bit scale of sub-block j (0..15), stored biased by 32.
inline int q3k_scale(const uint8_t* scales, int j) {
    const int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return low | (high << 4);
}

// 2-bit quants L[0..255] -> 64 bytes: byte 32*h + l holds L[128*h + l + 32*s] at bits 2*s.
inline void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
        }
    }
}

}  // namespace

// ---------------------------------------------------------------- Q2_K

void dequantize_q2_K(const void* src, float* dst, int64_t k) {
    const block_q2_K* x = static_cast<const block_q2_K*>(src);
    const int64_t nb = k / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const float min = fp16_to_f32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half) {   // two sub-blocks of 16 per shift
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF);
                    const float ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; ++l) {
                        *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                    }
                }
            }
            q += 32;
        }
    }
}

void quantize_q2_K(const float* src, void* dst, int64_t k) {
    block_q2_K* y = static_cast<block_q2_K*>(dst);
    const int64_t nb = k / QK_K;
    uint8_t L[QK_K];
    uint8_t Laux[16];
    float weights[16];
    float mins[QK_K / 16];
    float scales[QK_K / 16];
    const float q4scale = 15.0f;
    const float* x = src;
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f;   // the min is subtracted, so scales are >= 0
        float max_min = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0.0f) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = f32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = f32_to_fp16(0.0f);
        }
        if (max_min > 0.0f) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int l = nearest_int(iscale * mins[j]);
                y[i].scales[j] = (uint8_t)(y[i].scales[j] | (l << 4));
            }
            y[i].dmin = f32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = f32_to_fp16(0.0f);
        }
        // Requantize against the rounded (fp16, 4-bit) scales actually stored.
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = fp16_to_f32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = (uint8_t)clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

// ---------------------------------------------------------------- Q3_K

void dequantize_q3_K(const void* src, float* dst, int64_t k) {
    const block_q3_K* x = static_cast<const block_q3_K*>(src);
    const int64_t nb = k / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const float d_all = fp16_to_f32(x[i].d);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        uint8_t m = 1;   // hmask bit of the current group of 32; advances across both halves
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half) {
                    const float dl = d_all * (float)(q3k_scale(x[i].scales, is++) - 32);
                    for (int l = 16 * half; l < 16 * half + 16; ++l) {
                        const int q3 = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * (float)q3;
                    }
                }
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

// Stores the 16 biased 6-bit scales of a Q3_K block (ggml's layout, see q3k_scale).
static void pack_q3k_scales(const int8_t* biased, uint8_t* scales) {
    memset(scales, 0, 12);
    for (int j = 0; j < QK_K / 16; ++j) {
        int8_t l = biased[j];
        if (j < 8) {
            scales[j] = (uint8_t)(l & 0xF);
        } else {
            scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
        }
        l = (int8_t)(l >> 4);
        scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
    }
}

// 3-bit quants L[0..255] in [0, 7]: bit 2 goes to hmask (element j -> byte j % 32, bit j / 32),
// the low 2 bits to qs as in Q2_K.
static void pack_q3k_quants(int8_t* L, block_q3_K* y) {
    memset(y->hmask, 0, QK_K / 8);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < QK_K; ++j) {
        if (L[j] > 3) {
            y->hmask[m] |= hm;
            L[j] = (int8_t)(L[j] - 4);
        }
        if (++m == QK_K / 8) {
            m = 0;
            hm = (uint8_t)(hm << 1);
        }
    }
    pack_2bit(reinterpret_cast<const uint8_t*>(L), y->qs);
}

void quantize_q3_K(const float* src, void* dst, int64_t k) {
    block_q3_K* y = static_cast<block_q3_K*>(dst);
    const int64_t nb = k / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    int8_t biased[QK_K / 16];
    const float* x = src;
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int8_t l = (int8_t)nearest_int(iscale * scales[j]);   // ggml narrows first
                biased[j] = (int8_t)(clamp_int(l, -32, 31) + 32);
            }
            pack_q3k_scales(biased, y[i].scales);
            y[i].d = f32_to_fp16(1.0f / iscale);
        } else {
            memset(y[i].scales, 0, 12);
            y[i].d = f32_to_fp16(0.0f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const int8_t sc = (int8_t)(q3k_scale(y[i].scales, j) - 32);
            const float d = fp16_to_f32(y[i].d) * (float)sc;
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3);
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        pack_q3k_quants(L, &y[i]);
    }
}

// ---------------------------------------------------------------- Q4_K / Q5_K shared parts

// The 8 sub-blocks of 32 of one super-block: affine search per sub-block with weights
// sqrt(mean x^2) + |x|, then 6-bit scales/mins relative to the largest. Fills scales bytes,
// d, dmin; returns the per-element quants (requantized against the stored scales) in L.
static void quantize_k_affine_block(const float* x, int nmax, float rmin, float rdelta, int nstep,
                                    uint8_t* scale_bytes, fp16_t* d_out, fp16_t* dmin_out,
                                    uint8_t* L) {
    uint8_t Laux[32];
    float weights[32];
    float mins[QK_K / 32];
    float scales[QK_K / 32];
    float max_scale = 0.0f;   // the min is subtracted, so scales are >= 0
    float max_min = 0.0f;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < QK_K / 32; ++j) {
        // ggml: uint8_t ls = nearest_int(...); ls = MIN(63, ls) — narrow, then clamp.
        const uint8_t ls = std::min<uint8_t>(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        const uint8_t lm = std::min<uint8_t>(63, (uint8_t)nearest_int(inv_min * mins[j]));
        set_scale_min_k4(j, ls, lm, scale_bytes);
    }
    *d_out = f32_to_fp16(max_scale / 63.0f);
    *dmin_out = f32_to_fp16(max_min / 63.0f);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, scale_bytes, &sc, &m);
        const float d = fp16_to_f32(*d_out) * (float)sc;
        if (d == 0.0f) continue;
        const float dm = fp16_to_f32(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ++ii) {
            L[32 * j + ii] = (uint8_t)clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
        }
    }
}

// ---------------------------------------------------------------- Q4_K

void dequantize_q4_K(const void* src, float* dst, int64_t k) {
    const block_q4_K* x = static_cast<const block_q4_K*>(src);
    const int64_t nb = k / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* q = x[i].qs;
        const float d = fp16_to_f32(x[i].d);
        const float min = fp16_to_f32(x[i].dmin);
        for (int is = 0; is < QK_K / 32; is += 2, q += 32) {
            uint8_t sc, m;
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = min * (float)m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc;
            const float m2 = min * (float)m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void quantize_q4_K(const float* src, void* dst, int64_t k) {
    block_q4_K* y = static_cast<block_q4_K*>(dst);
    const int64_t nb = k / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; ++i) {
        quantize_k_affine_block(src + i * QK_K, 15, -1.0f, 0.1f, 20, y[i].scales, &y[i].d,
                                &y[i].dmin, L);
        uint8_t* q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

// ---------------------------------------------------------------- Q5_K

void dequantize_q5_K(const void* src, float* dst, int64_t k) {
    const block_q5_K* x = static_cast<const block_q5_K*>(src);
    const int64_t nb = k / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        const float d = fp16_to_f32(x[i].d);
        const float min = fp16_to_f32(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;   // qh bits of the two sub-blocks of this group of 64
        for (int is = 0; is < QK_K / 32; is += 2, ql += 32) {
            uint8_t sc, m;
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc;
            const float m1 = min * (float)m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc;
            const float m2 = min * (float)m;
            for (int l = 0; l < 32; ++l) {
                *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            }
            for (int l = 0; l < 32; ++l) {
                *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            }
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

void quantize_q5_K(const float* src, void* dst, int64_t k) {
    block_q5_K* y = static_cast<block_q5_K*>(dst);
    const int64_t nb = k / QK_K;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; ++i) {
        quantize_k_affine_block(src + i * QK_K, 31, -0.5f, 0.1f, 15, y[i].scales, &y[i].d,
                                &y[i].dmin, L);
        uint8_t* qh = y[i].qh;
        uint8_t* ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

// ---------------------------------------------------------------- Q6_K

void dequantize_q6_K(const void* src, float* dst, int64_t k) {
    const block_q6_K* x = static_cast<const block_q6_K*>(src);
    const int64_t nb = k / QK_K;
    float* y = dst;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

// 6-bit quants L[0..255] in [0, 63] -> ql (low nibbles) and qh (2 high bits), ggml's layout.
static void pack_q6k_quants(const int8_t* L, block_q6_K* y) {
    uint8_t* ql = y->ql;
    uint8_t* qh = y->qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = L[j + l + 0] & 0xF;
            const uint8_t q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF;
            const uint8_t q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                              ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
    }
}

void quantize_q6_K(const float* src, void* dst, int64_t k) {
    block_q6_K* y = static_cast<block_q6_K*>(dst);
    const int64_t nb = k / QK_K;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    const float* x = src;
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f;
        float max_abs_scale = 0.0f;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            scales[ib] = make_qx_quants_sq(16, 32, x + 16 * ib, L + 16 * ib);
            const float abs_scale = fabsf(scales[ib]);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < kGroupMaxEps) {   // all-zero block (d = +0 included)
            memset(&y[i], 0, sizeof(block_q6_K));
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = f32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            y[i].scales[ib] = (int8_t)std::min(127, nearest_int(iscale * scales[ib]));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y[i].d) * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31);
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        pack_q6k_quants(L, &y[i]);
    }
}

// ---------------------------------------------------------------- Q8_K

void dequantize_q8_K(const void* src, float* dst, int64_t k) {
    const block_q8_K* x = static_cast<const block_q8_K*>(src);
    const int64_t nb = k / QK_K;
    for (int64_t i = 0; i < nb; ++i) {
        for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = x[i].d * (float)x[i].qs[j];
    }
}

void quantize_q8_K(const float* src, void* dst, int64_t k) {
    block_q8_K* y = static_cast<block_q8_K*>(dst);
    const int64_t nb = k / QK_K;
    const float* x = src;
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            // ggml leaves bsums unwritten here; zeros are their true value.
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        // -127 (not -128) as in ggml, so every quant fits [-127, 127] symmetric.
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; ++j) y[i].qs[j] = (int8_t)std::min(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

}  // namespace ref
}  // namespace lll
