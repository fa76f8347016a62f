// dot_i8mm.cpp — the aarch64 I8mm level (FEAT_I8MM: Neoverse V1 / N2, Graviton 3+, Cortex-A510 /
// A710 and later): for the legacy 32-blocks (Q4_0, Q4_1, Q5_0, Q8_0), 2 x 2 tiles whose four
// block sums come from SMMLA (vmmlaq_s32: a 2 x 8 by 8 x 2 int8 product into 2 x 2 int32 lanes),
// four per block; tiles of one row or one column use the dotprod kernels' code (compiled here).
// Every (weight row, activation row) pair gets the same exact block sums and the same fold
// (dot_neon_kernels.h) in every tile shape, so matmul stays batch invariant. The K-quants run the
// Dotprod level's kernels (their per-sub-block scales would need a fold per row pair; not yet).
// As dot_dotprod.cpp: only the functions between the target pragmas are compiled for more than
// armv8-a, every header is included before them, and they run where isa.cpp found FEAT_I8MM.
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_I8MM
#include <arm_neon.h>

#include "common/fp16.h"

namespace lll {
namespace kern {

// Named, not anonymous (see dot_scalar.cpp): tiles of two files must not merge.
namespace i8mm_impl {

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")   // arm_neon.h's vmmlaq_s32 and vdotq_s32

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

#include "backends/cpu/quants/dot/dot_neon_kernels.h"

// [a.lo64, b.lo64] and [a.hi64, b.hi64]: 8 quants of row 0 beside the same 8 of row 1.
inline int8x16_t pair_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
inline int8x16_t pair_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// The exact sums of one block for weight rows w0, w1 and activation rows x0, x1, as lanes
// {w0.x0, w0.x1, w1.x0, w1.x1}.
template <class T>
inline int32x4_t block_sums_2x2(const typename T::W& w0, const typename T::W& w1, const int8_t* x0, const int8_t* x1) {
    int8x16_t w0_lo, w0_hi, w1_lo, w1_hi;
    T::quants(w0, &w0_lo, &w0_hi);
    T::quants(w1, &w1_lo, &w1_hi);
    const int8x16_t x0_lo = vld1q_s8(x0), x0_hi = vld1q_s8(x0 + 16);
    const int8x16_t x1_lo = vld1q_s8(x1), x1_hi = vld1q_s8(x1 + 16);
    int32x4_t acc = vdupq_n_s32(0);
    acc = vmmlaq_s32(acc, pair_lo(w0_lo, w1_lo), pair_lo(x0_lo, x1_lo));   // elements 0-7
    acc = vmmlaq_s32(acc, pair_hi(w0_lo, w1_lo), pair_hi(x0_lo, x1_lo));   // 8-15
    acc = vmmlaq_s32(acc, pair_lo(w0_hi, w1_hi), pair_lo(x0_hi, x1_hi));   // 16-23
    return vmmlaq_s32(acc, pair_hi(w0_hi, w1_hi), pair_hi(x0_hi, x1_hi));  // 24-31
}

template <class T>
struct LegacyTile {
    // R x C <= 2 x 2; Y[c * ldy + r] = dot(weight row r, activation row c).
    template <int R, int C>
    struct Tile {
        static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
            if constexpr (R == 2 && C == 2) {
                const typename T::W* w0 = (const typename T::W*)w;
                const typename T::W* w1 = (const typename T::W*)(w + ws);
                const typename T::X* x0 = (const typename T::X*)x;
                const typename T::X* x1 = (const typename T::X*)(x + xs);
                float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f;
                for (int64_t i = 0; i < k / 32; ++i) {
                    const int32x4_t sums = block_sums_2x2<T>(w0[i], w1[i], x0[i].qs, x1[i].qs);
                    s00 = T::fold(s00, vgetq_lane_s32(sums, 0), w0[i], x0[i]);
                    s01 = T::fold(s01, vgetq_lane_s32(sums, 1), w0[i], x1[i]);
                    s10 = T::fold(s10, vgetq_lane_s32(sums, 2), w1[i], x0[i]);
                    s11 = T::fold(s11, vgetq_lane_s32(sums, 3), w1[i], x1[i]);
                }
                y[0] = s00;
                y[1] = s10;
                y[ldy] = s01;
                y[ldy + 1] = s11;
            } else {
                for (int c = 0; c < C; ++c)
                    for (int r = 0; r < R; ++r) y[c * ldy + r] = dot_legacy<T>(k, w + r * ws, x + c * xs);
            }
        }
    };
};

#pragma GCC pop_options

// 2 x 2 tiles at most; decode (one activation row) runs 1 x 1.
template <class T>
KernelSet make_legacy_set() {
    KernelSet ks = make_tile_set<LegacyTile<T>::template Tile, 2, 2, 1>(Isa::I8mm);
    return ks;
}

}  // namespace i8mm_impl
using namespace i8mm_impl;

LLL_DEFINE_KERNEL_SET(i8mm_q4_0, make_legacy_set<Q4_0>())
LLL_DEFINE_KERNEL_SET(i8mm_q4_1, make_legacy_set<Q4_1>())
LLL_DEFINE_KERNEL_SET(i8mm_q5_0, make_legacy_set<Q5_0>())
LLL_DEFINE_KERNEL_SET(i8mm_q8_0, make_legacy_set<Q8_0>())

}  // namespace kern
}  // namespace lll

#endif  // LLL_BUILD_I8MM
