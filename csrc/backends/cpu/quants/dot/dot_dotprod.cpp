// dot_dotprod.cpp — the aarch64 Dotprod level: dot_neon_kernels.h's integer kernels with 16 int8
// products summed by one SDOT (vdotq_s32, FEAT_DotProd) instead of widening multiplies and
// pairwise adds. Only the functions between the target pragmas are compiled for
// armv8.2-a+dotprod; every header is included before them (its inline functions stay armv8-a, so
// no copy compiled for dotprod can be merged into code a plain armv8-a CPU runs), and these run
// only where isa.cpp found FEAT_DotProd. Float rows have no dotprod form: F32 / F16 use Neon's.
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_DOTPROD
#include <arm_neon.h>

#include "common/fp16.h"

namespace lll {
namespace kern {

// Named, not anonymous (see dot_scalar.cpp): tiles of two files must not merge.
namespace dotprod_impl {

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")   // as arm_neon.h declares vdotq_s32

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

#include "backends/cpu/quants/dot/dot_neon_kernels.h"

#pragma GCC pop_options

// 1 x 1 tiles, as dot_neon.cpp's (built here for plain armv8-a: it runs when the set is made).
template <VecDotFn F>
KernelSet make_set() {
    KernelSet ks{};
    ks.isa = Isa::Dotprod;
    ks.vec_dot = F;
    TileTable<DotTile<F>::template T, 1, 1>::fill(ks);
    return ks;
}

}  // namespace dotprod_impl
using namespace dotprod_impl;

LLL_DEFINE_KERNEL_SET(dotprod_q4_0, make_set<dot_legacy<Q4_0>>())
LLL_DEFINE_KERNEL_SET(dotprod_q4_1, make_set<dot_legacy<Q4_1>>())
LLL_DEFINE_KERNEL_SET(dotprod_q5_0, make_set<dot_legacy<Q5_0>>())
LLL_DEFINE_KERNEL_SET(dotprod_q8_0, make_set<dot_legacy<Q8_0>>())
LLL_DEFINE_KERNEL_SET(dotprod_q4_K, make_set<dot_q4_K>())
LLL_DEFINE_KERNEL_SET(dotprod_q6_K, make_set<dot_q6_K>())

}  // namespace kern
}  // namespace lll

#endif  // LLL_BUILD_DOTPROD
