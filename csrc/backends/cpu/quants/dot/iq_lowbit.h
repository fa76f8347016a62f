// iq_lowbit.h — decoding of the low-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) for
// the dot products of every level (dot_scalar.cpp, dot_avx2_iq.cpp).
//
// Each type is read 32 weights at a time as a Group32: 32 unsigned grid bytes (4 little-endian
// words of 8), 32 sign bits (bit j set: weight j is negative) and the odd integer multipliers of
// its two halves of 16. A super-block's dot product with Q8_K is then the exact integer
//   isum = sum over groups, halves h: mult[h] * sum_j grid[j] * (sign j ? -1 : 1) * q8[j]
// and the result sum over super-blocks of (d * d8) * isum (add_scaled), times the type's kFinal — what
// ggml's generic vec_dots compute (ggml folds kFinal into each block's sum, a rounding apart).
// |isum| <= 16 * 16 * 62 * 127 * 31 < 2^31: exact in int32.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/blocks.h"
#include "iq_grids_data.h"

namespace lll {
namespace kern {
namespace iqlow {

// sum + (d * d8) * isum with one rounding of the product-sum (fmaf: correctly rounded wherever it
// runs), so the compiler's contraction choices cannot make the levels differ.
inline float add_scaled(float sum, float d, float d8, int isum) { return fmaf(d * d8, (float)isum, sum); }

struct Group32 {
    uint64_t grid[4];   // 32 grid bytes, 8 per word, element order
    uint32_t signs;     // bit j: element j negative
    int mult[2];        // multiplier of elements 0..15 and 16..31
};

// 4 sign bytes of ksigns_iq2xs for the 4 x 7-bit fields of a packed IQ2_XXS / IQ3_XXS word.
inline uint32_t ksigns4(uint32_t packed) {
    uint32_t s = 0;
    for (int l = 0; l < 4; ++l) s |= (uint32_t)iq::ksigns_iq2xs[(packed >> 7 * l) & 127] << 8 * l;
    return s;
}

// Two 4-byte grid points as one 8-byte word (first point in the low half).
inline uint64_t pair(const uint32_t* grid, int a, int b) { return grid[a] | (uint64_t)grid[b] << 32; }

struct IQ2XXS {
    typedef block_iq2_xxs Block;
    static constexpr float kFinal = 0.125f;
    static void group(const Block& b, int ib, Group32& g) {
        uint32_t aux[2];
        memcpy(aux, b.qs + 4 * ib, sizeof(aux));
        for (int l = 0; l < 4; ++l) g.grid[l] = iq::iq2xxs_grid[(aux[0] >> 8 * l) & 255];
        g.signs = ksigns4(aux[1]);
        g.mult[0] = g.mult[1] = 2 * (int)(aux[1] >> 28) + 1;
    }
};

struct IQ2XS {
    typedef block_iq2_xs Block;
    static constexpr float kFinal = 0.125f;
    static void group(const Block& b, int ib, Group32& g) {
        g.signs = 0;
        for (int l = 0; l < 4; ++l) {
            const uint16_t q = b.qs[4 * ib + l];
            g.grid[l] = iq::iq2xs_grid[q & 511];
            g.signs |= (uint32_t)iq::ksigns_iq2xs[q >> 9] << 8 * l;
        }
        g.mult[0] = 2 * (b.scales[ib] & 0xf) + 1;
        g.mult[1] = 2 * (b.scales[ib] >> 4) + 1;
    }
};

struct IQ2S {
    typedef block_iq2_s Block;
    static constexpr float kFinal = 0.125f;
    static void group(const Block& b, int ib, Group32& g) {
        for (int l = 0; l < 4; ++l)
            g.grid[l] = iq::iq2s_grid[b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300)];
        memcpy(&g.signs, b.qs + QK_K / 8 + 4 * ib, 4);
        g.mult[0] = 2 * (b.scales[ib] & 0xf) + 1;
        g.mult[1] = 2 * (b.scales[ib] >> 4) + 1;
    }
};

struct IQ3XXS {
    typedef block_iq3_xxs Block;
    static constexpr float kFinal = 0.25f;
    static void group(const Block& b, int ib, Group32& g) {
        const uint8_t* q = b.qs + 8 * ib;
        for (int l = 0; l < 4; ++l) g.grid[l] = pair(iq::iq3xxs_grid, q[2 * l], q[2 * l + 1]);
        uint32_t aux;
        memcpy(&aux, b.qs + QK_K / 4 + 4 * ib, sizeof(aux));
        g.signs = ksigns4(aux);
        g.mult[0] = g.mult[1] = 2 * (int)(aux >> 28) + 1;
    }
};

struct IQ3S {
    typedef block_iq3_s Block;
    static constexpr float kFinal = 1.0f;
    static void group(const Block& b, int ib, Group32& g) {
        const uint8_t* q = b.qs + 8 * ib;
        const int qh = b.qh[ib];
        for (int l = 0; l < 4; ++l)
            g.grid[l] = pair(iq::iq3s_grid, q[2 * l] | ((qh << (8 - 2 * l)) & 256),
                             q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256));
        memcpy(&g.signs, b.signs + 4 * ib, 4);
        g.mult[0] = g.mult[1] = 2 * ((b.scales[ib / 2] >> 4 * (ib % 2)) & 0xf) + 1;
    }
};

}  // namespace iqlow
}  // namespace kern
}  // namespace lll
