// dot_neon.cpp — aarch64 Neon (Advanced SIMD, every armv8-a CPU) dot products for the block types
// of the reference models (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) and F32 / F16 rows; every other
// type runs the scalar reference on aarch64. The integer kernels are dot_neon_kernels.h's, with
// 16 int8 products summed by widening multiplies (SMULL: int16 products, exact for |q| <= 128)
// and pairwise adds into int32 lanes. Held to the scalar reference by tests/test_kernels.py.
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_NEON
#include <arm_neon.h>

#include "common/fp16.h"

namespace lll {
namespace kern {

// Named, not anonymous (see dot_scalar.cpp): tiles of two files must not merge.
namespace neon_impl {

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

#include "backends/cpu/quants/dot/dot_neon_kernels.h"

// ---- plain float rows: f32 fused multiply-adds in 16 lanes (4 accumulators), then the tail ----

inline float sum_lanes(const float32x4_t acc[4]) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
}

float dot_f32(int64_t n, const void* vw, const void* vx) {
    const float* w = (const float*)vw;
    const float* x = (const float*)vx;
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f32(acc[k], vld1q_f32(w + i + 4 * k), vld1q_f32(x + i + 4 * k));
    float s = sum_lanes(acc);
    for (; i < n; ++i) s += w[i] * x[i];
    return s;
}

// f16 -> f32 by FCVTL (base armv8-a; exact, as fp16_to_f32).
inline float32x4_t load_f16(const fp16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

float dot_f16(int64_t n, const void* vw, const void* vx) {
    const fp16_t* w = (const fp16_t*)vw;
    const fp16_t* x = (const fp16_t*)vx;
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f32(acc[k], load_f16(w + i + 4 * k), load_f16(x + i + 4 * k));
    float s = sum_lanes(acc);
    for (; i < n; ++i) s += h2f(w[i]) * h2f(x[i]);
    return s;
}

// The kernel set of one dot product: 1 x 1 tiles (each (weight row, activation row) pair is this
// function whatever the tile shape, so matmul is batch invariant).
template <VecDotFn F>
KernelSet make_set() {
    KernelSet ks{};
    ks.isa = Isa::Neon;
    ks.vec_dot = F;
    TileTable<DotTile<F>::template T, 1, 1>::fill(ks);
    return ks;
}

}  // namespace neon_impl
using namespace neon_impl;

LLL_DEFINE_KERNEL_SET(neon_q4_0, make_set<dot_legacy<Q4_0>>())
LLL_DEFINE_KERNEL_SET(neon_q4_1, make_set<dot_legacy<Q4_1>>())
LLL_DEFINE_KERNEL_SET(neon_q5_0, make_set<dot_legacy<Q5_0>>())
LLL_DEFINE_KERNEL_SET(neon_q8_0, make_set<dot_legacy<Q8_0>>())
LLL_DEFINE_KERNEL_SET(neon_q4_K, make_set<dot_q4_K>())
LLL_DEFINE_KERNEL_SET(neon_q6_K, make_set<dot_q6_K>())
LLL_DEFINE_KERNEL_SET(neon_f32, make_set<dot_f32>())
LLL_DEFINE_KERNEL_SET(neon_f16, make_set<dot_f16>())

}  // namespace kern
}  // namespace lll

#endif  // LLL_BUILD_NEON
