// ref_iq_quant.cpp — quantizers of the low-bit i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and
// IQ3_S, byte for byte what ggml's quantize_iq2_xxs / iq2_xs / iq2_s / iq3_xxs / iq3_s write
// for one row and the same importance weights (tests/test_iq_lowbit.py compares with ggml built
// from the vendored llama.cpp).
//
// The five share one search, run per group of 32 (IQ2_XS / IQ2_S: 16) weights: the weights'
// signs are taken out (for the types with 7 stored sign bits per 8, an odd number of negatives
// flips the least important one), then for a range of trial scales every sub-point of 8 (IQ2_*)
// or 4 (IQ3_*) magnitudes is rounded to the level lattice and, when that key is not a grid
// point, replaced by the best of its precomputed grid neighbours (iq_lattice.h); the scale with
// the best weighted least-squares fit wins and is refit once more. The group scales are then
// stored as 4-bit multiples of a super-block scale. The type-specific parts are the Params
// below and the packing of each type's bits. Same float operations in the same order as ggml
// (no FMA contraction: ref_*.cpp are compiled with -ffp-contract=off).
#include <math.h>
#include <string.h>

#include <algorithm>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/quants/ref/iq_lattice.h"
#include "backends/cpu/quants/ref/ggml_rounding.h"
#include "backends/cpu/quants/ref/ref_rows.h"

namespace lll {
namespace ref {

namespace {

inline float fmax_ggml(float a, float b) { return a > b ? a : b; }   // ggml's MAX

// How one type runs the shared group search.
struct Params {
    GGMLType type;
    int group;            // weights per scale (32 or 16)
    int max_q;            // lattice levels: 3 (IQ2_*) or 8 (IQ3_*)
    int is_range;         // trial scales is = -is_range .. is_range
    float is_step;        // trial scale k: (2 max_q - 1 + is * is_step) / max
    float eps;            // a group whose largest magnitude is below eps is zero
    bool parity_signs;    // 7 stored sign bits per 8 (the 8th is the parity)
    float sigma_mult;     // sigma2 = sigma_mult * sum(x^2) / QK_K
    bool first_fit_qp;    // IQ2_XXS: first fit from make_qp_quants, trial scales about it
    bool always_refit;    // refit every sub-point at the final scale (else only off-grid ones)
    bool start_on_grid;   // on-grid flags before the first accepted trial
    bool refit_all_points;   // when refitting, redo on-grid sub-points too
};

constexpr Params kIQ2XXS{GGMLType::IQ2_XXS, 32, 3, 6, 0.1f, 1e-15f, true, 1.0f, true, true, true, true};
constexpr Params kIQ2XS{GGMLType::IQ2_XS, 16, 3, 9, 0.1f, 1e-15f, true, 1.0f, false, false, true, false};
constexpr Params kIQ2S{GGMLType::IQ2_S, 16, 3, 9, 0.1f, 1e-8f, false, 2.0f, false, false, true, false};
constexpr Params kIQ3XXS{GGMLType::IQ3_XXS, 32, 8, 15, 0.2f, 1e-8f, true, 2.0f, false, false, true, false};
constexpr Params kIQ3S{GGMLType::IQ3_S, 32, 8, 9, 0.2f, 0.0f, false, 2.0f, false, false, false, true};

// One group's result: its scale (>= 0), the lattice levels of its weights' magnitudes, the grid
// index of each sub-point and the sign byte of each 8 weights.
struct GroupFit {
    bool zero = true;   // all-zero group: no bits stored
    float scale = 0;
    int8_t L[32];
    int grid[8];
    uint8_t signs[4];
};

// Magnitudes of the group's weights into xval, their signs into fit.signs (parity types: an odd
// number of negatives in 8 flips the one of least weight * x^2, and keeps 7 bits).
void take_signs(const Params& p, const float* xb, const float* weight, float* xval, GroupFit& fit) {
    for (int k = 0; k < p.group / 8; ++k) {
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; ++i) {
            if (xb[8 * k + i] >= 0) {
                xval[8 * k + i] = xb[8 * k + i];
            } else {
                xval[8 * k + i] = -xb[8 * k + i];
                ++nflip;
                s |= (uint8_t)(1 << i);
            }
        }
        if (p.parity_signs && nflip % 2) {
            int imin = 0;
            float min = weight[8 * k + imin] * xb[8 * k + imin] * xb[8 * k + imin];
            for (int i = 1; i < 8; ++i) {
                const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if (ax < min) {
                    min = ax;
                    imin = i;
                }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        fit.signs[k] = p.parity_signs ? (uint8_t)(s & 127) : s;
    }
}

// Levels of sub-point k at inverse scale id into L (clamped), its key; then, off the grid, the
// best neighbour at `scale` (L rewritten). Returns the grid index; *on_grid says which case.
int fit_point(const Params& p, const IqLattice& lat, int k, float id, float scale, const float* xval,
              const float* waux, int8_t* L, bool* on_grid) {
    const int d = lat.dims;
    uint32_t key = 0;
    for (int i = 0; i < d; ++i) {
        const int l = nearest_int(0.5f * (id * xval[d * k + i] - 1));
        L[d * k + i] = (int8_t)std::max(0, std::min(p.max_q - 1, l));
        key |= (uint32_t)L[d * k + i] << lat.bits * i;
    }
    const int g = lat.on_grid(key);
    *on_grid = g >= 0;
    if (g >= 0) return g;
    return iq_best_neighbour(lat, key, xval + d * k, waux + d * k, scale, L + d * k);
}

// Weighted least-squares sums of the magnitudes against the levels' values 2 L + 1.
void ls_sums(int n, const float* weight, const float* xval, const int8_t* L, float* sumqx, float* sumq2) {
    float sx = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
        const float w = weight[i];
        const float q = 2 * L[i] + 1;
        sx += w * xval[i] * q;
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

// The trial-scale search and final refit of one non-zero group (max: its largest magnitude).
// IQ2_XXS starts from make_qp_quants' fit (levels in fit.L) and searches about its scale * max_q.
void search_scale(const Params& p, const IqLattice& lat, float max, float qp_scale, const float* weight,
                  const float* xval, const float* waux, GroupFit& fit) {
    const int npts = p.group / lat.dims;
    float scale = p.first_fit_qp ? qp_scale : max / (2 * p.max_q - 1);
    const float range = p.first_fit_qp ? qp_scale * p.max_q : max;
    bool on_grid[8], on_grid_aux[8];
    for (int k = 0; k < npts; ++k) on_grid[k] = p.start_on_grid;
    float best = 0;
    int8_t Laux[32];
    for (int is = -p.is_range; is <= p.is_range; ++is) {
        const float id = (2 * p.max_q - 1 + is * p.is_step) / range;
        const float this_scale = 1 / id;
        for (int k = 0; k < npts; ++k) fit_point(p, lat, k, id, this_scale, xval, waux, Laux, &on_grid_aux[k]);
        float sumqx, sumq2;
        ls_sums(p.group, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(fit.L, Laux, p.group);
            memcpy(on_grid, on_grid_aux, sizeof(on_grid));
        }
    }
    int n_off = 0;
    for (int k = 0; k < npts; ++k) n_off += !on_grid[k];
    if ((p.always_refit || n_off > 0) && scale > 0) {
        const float id = 1 / scale;
        bool unused;
        for (int k = 0; k < npts; ++k)
            if (p.always_refit || p.refit_all_points || !on_grid[k])
                fit_point(p, lat, k, id, scale, xval, waux, fit.L, &unused);
        float sumqx, sumq2;
        ls_sums(p.group, weight, xval, fit.L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    if (scale < 0) {   // never expected; kept as ggml does: flip the scale and the signs
        scale = -scale;
        for (int k = 0; k < p.group / 8 && k < 4; ++k) fit.signs[k] = p.parity_signs ? (uint8_t)(~fit.signs[k] & 127) : (uint8_t)~fit.signs[k];
    }
    fit.scale = scale;
}

// One group of one super-block: weights, signs, search; the grid index of each sub-point.
void fit_group(const Params& p, const IqLattice& lat, const float* xb, const float* qw, float sigma2, GroupFit& fit) {
    float weight[32], waux[32], xval[32];
    for (int i = 0; i < p.group; ++i) {
        if (qw) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
        else if (p.type == GGMLType::IQ2_S) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
        else weight[i] = xb[i] * xb[i];
    }
    for (int i = 0; i < p.group; ++i) waux[i] = sqrtf(weight[i]);
    take_signs(p, xb, weight, xval, fit);
    float max = xval[0];
    for (int i = 1; i < p.group; ++i) max = fmax_ggml(max, xval[i]);
    memset(fit.L, 0, sizeof(fit.L));
    fit.scale = 0;
    fit.zero = true;
    if (p.type == GGMLType::IQ3_S ? !max : max < p.eps) return;
    float qp_scale = 0;
    if (p.first_fit_qp) {
        qp_scale = make_qp_quants(p.group, p.max_q + 1, xval, (uint8_t*)fit.L, weight);
        if (qp_scale * p.max_q <= 0) return;
    }
    fit.zero = false;
    search_scale(p, lat, max, qp_scale, weight, xval, waux, fit);
    for (int k = 0; k < p.group / lat.dims; ++k) {
        uint32_t key = 0;
        for (int i = 0; i < lat.dims; ++i) key |= (uint32_t)(uint8_t)fit.L[lat.dims * k + i] << lat.bits * i;
        fit.grid[k] = std::max(0, lat.on_grid(key));   // on the grid after the search
    }
}

// The super-block's 4-bit group scales: nearest_int(0.5 (s / d - 1)) in 0..15, d = max / 31.
void group_scale_codes(int n, const float* scales, float max_scale, uint8_t* codes) {
    const float id = 1 / (max_scale / 31);
    for (int ib = 0; ib < n; ++ib)
        codes[ib] = (uint8_t)std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
}

// Fits every group of one super-block; returns the largest group scale (0: all-zero block).
float fit_superblock(const Params& p, const float* xbl, const float* qw, GroupFit* fits, float* scales) {
    const IqLattice& lat = iq_lattice(p.type);
    float sumx2 = 0;
    for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = p.sigma_mult == 1.0f ? sumx2 / QK_K : 2 * sumx2 / QK_K;
    float max_scale = 0;
    for (int ib = 0; ib < QK_K / p.group; ++ib) {
        fit_group(p, lat, xbl + p.group * ib, qw ? qw + p.group * ib : nullptr, sigma2, fits[ib]);
        scales[ib] = fits[ib].scale;
        max_scale = fmax_ggml(max_scale, fits[ib].scale);
    }
    return max_scale;
}

// The super-block's common part: zeroed block, group fits, 4-bit scale codes; false when the
// block is all zero (then it stays zero, as ggml writes it).
template <class Block>
bool quantize_superblock(const Params& p, const float* x, const float* qw, Block& y, GroupFit* fits,
                         uint8_t* codes, float fudge) {
    float scales[QK_K / 16];
    memset(&y, 0, sizeof(y));
    const float max_scale = fit_superblock(p, x, qw, fits, scales);
    if (!max_scale) return false;
    y.d = f32_to_fp16(max_scale / 31 * fudge);
    group_scale_codes(QK_K / p.group, scales, max_scale, codes);
    return true;
}

}  // namespace

void quantize_weighted_iq2_xxs(const float* src, void* dst, int64_t k, const float* importance) {
    block_iq2_xxs* y = static_cast<block_iq2_xxs*>(dst);
    for (int64_t ibl = 0; ibl < k / QK_K; ++ibl) {
        GroupFit fits[8];
        uint8_t codes[8];
        if (!quantize_superblock(kIQ2XXS, src + QK_K * ibl, importance ? importance + QK_K * ibl : nullptr, y[ibl],
                                 fits, codes, 1.0f))
            continue;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t q2[2] = {0, (uint32_t)codes[ib] << 28};
            for (int j = 0; j < 4 && !fits[ib].zero; ++j) {
                q2[0] |= (uint32_t)fits[ib].grid[j] << 8 * j;
                q2[1] |= (uint32_t)fits[ib].signs[j] << 7 * j;
            }
            memcpy(y[ibl].qs + 4 * ib, q2, sizeof(q2));
        }
    }
}

void quantize_weighted_iq2_xs(const float* src, void* dst, int64_t k, const float* importance) {
    block_iq2_xs* y = static_cast<block_iq2_xs*>(dst);
    for (int64_t ibl = 0; ibl < k / QK_K; ++ibl) {
        GroupFit fits[16];
        uint8_t codes[16];
        if (!quantize_superblock(kIQ2XS, src + QK_K * ibl, importance ? importance + QK_K * ibl : nullptr, y[ibl],
                                 fits, codes, 1.0f))
            continue;
        for (int ib = 0; ib < 16; ++ib) {
            for (int j = 0; j < 2 && !fits[ib].zero; ++j)
                y[ibl].qs[2 * ib + j] = (uint16_t)(fits[ib].grid[j] | (fits[ib].signs[j] << 9));
            y[ibl].scales[ib / 2] |= (uint8_t)(codes[ib] << 4 * (ib % 2));
        }
    }
}

void quantize_weighted_iq2_s(const float* src, void* dst, int64_t k, const float* importance) {
    block_iq2_s* y = static_cast<block_iq2_s*>(dst);
    for (int64_t ibl = 0; ibl < k / QK_K; ++ibl) {
        GroupFit fits[16];
        uint8_t codes[16];
        if (!quantize_superblock(kIQ2S, src + QK_K * ibl, importance ? importance + QK_K * ibl : nullptr, y[ibl],
                                 fits, codes, 0.9875f))
            continue;
        for (int ib = 0; ib < 16; ++ib) {
            for (int j = 0; j < 2 && !fits[ib].zero; ++j) {
                const int i8 = 2 * ib + j;
                y[ibl].qs[i8] = (uint8_t)(fits[ib].grid[j] & 255);
                y[ibl].qh[i8 / 4] |= (uint8_t)((fits[ib].grid[j] >> 8) << 2 * (i8 % 4));
                y[ibl].qs[QK_K / 8 + i8] = fits[ib].signs[j];
            }
            y[ibl].scales[ib / 2] |= (uint8_t)(codes[ib] << 4 * (ib % 2));
        }
    }
}

void quantize_weighted_iq3_xxs(const float* src, void* dst, int64_t k, const float* importance) {
    block_iq3_xxs* y = static_cast<block_iq3_xxs*>(dst);
    for (int64_t ibl = 0; ibl < k / QK_K; ++ibl) {
        GroupFit fits[8];
        uint8_t codes[8];
        if (!quantize_superblock(kIQ3XXS, src + QK_K * ibl, importance ? importance + QK_K * ibl : nullptr, y[ibl],
                                 fits, codes, 1.0125f))
            continue;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t sas = (uint32_t)codes[ib] << 28;
            if (!fits[ib].zero) {
                for (int j = 0; j < 8; ++j) y[ibl].qs[8 * ib + j] = (uint8_t)fits[ib].grid[j];
                for (int j = 0; j < 4; ++j) sas |= (uint32_t)fits[ib].signs[j] << 7 * j;
            }
            memcpy(y[ibl].qs + QK_K / 4 + 4 * ib, &sas, sizeof(sas));
        }
    }
}

void quantize_weighted_iq3_s(const float* src, void* dst, int64_t k, const float* importance) {
    block_iq3_s* y = static_cast<block_iq3_s*>(dst);
    for (int64_t ibl = 0; ibl < k / QK_K; ++ibl) {
        GroupFit fits[8];
        uint8_t codes[8];
        if (!quantize_superblock(kIQ3S, src + QK_K * ibl, importance ? importance + QK_K * ibl : nullptr, y[ibl],
                                 fits, codes, 1.033f))
            continue;
        // ggml advances its qs / signs write positions past non-zero groups only: after an
        // all-zero group the next group's indices and signs land in the zero group's slots.
        int slot = 0;
        for (int ib = 0; ib < 8; ++ib) {
            y[ibl].scales[ib / 2] |= (uint8_t)(codes[ib] << 4 * (ib % 2));
            if (fits[ib].zero) continue;
            for (int j = 0; j < 8; ++j) {
                y[ibl].qs[8 * slot + j] = (uint8_t)(fits[ib].grid[j] & 255);
                y[ibl].qh[ib] |= (uint8_t)((fits[ib].grid[j] >> 8) << j);
            }
            for (int j = 0; j < 4; ++j) y[ibl].signs[4 * slot + j] = fits[ib].signs[j];
            ++slot;
        }
    }
}

void quantize_iq2_s(const float* src, void* dst, int64_t k) { quantize_weighted_iq2_s(src, dst, k, nullptr); }
void quantize_iq3_xxs(const float* src, void* dst, int64_t k) { quantize_weighted_iq3_xxs(src, dst, k, nullptr); }
void quantize_iq3_s(const float* src, void* dst, int64_t k) { quantize_weighted_iq3_s(src, dst, k, nullptr); }

}  // namespace ref
}  // namespace lll
