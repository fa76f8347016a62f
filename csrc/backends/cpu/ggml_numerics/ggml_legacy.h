// ggml_legacy.h — dot products of the legacy 32-element block types in llama.cpp's exact float
// order (the "llama.cpp numerics" mode; model.h: Numerics).
//
// ggml's x86 kernels for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (its vec_dot for one row and
// llamafile's tinyBLAS for prompt batches alike) compute one output as
//
//   acc[0..7] = 0, summs = 0
//   for block b:  S[j] = exact integer sum of elements 4j..4j+3 (weight quant x activation quant)
//                 acc[j] = fmaf(d_w * d_x, (float)S[j], acc[j])        j = 0..7
//                 Q4_1 / Q5_1 only:  summs = fmaf(m_w, s_x, summs)
//   y = hsum8(acc) + summs                                              (ggml_math.h)
//
// Eight lane accumulators rather than one: the result is bit-identical to llama.cpp's, and, as
// it depends on nothing but the two rows, still the same for any batch shape or thread split.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backends/cpu/quants/quants.h"
#include "common/threadpool.h"

namespace lll {
namespace ggml_order {

bool legacy_supported(GGMLType wtype);   // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0

// Scalar reference: one weight row . one activation row (type_traits(wtype)->vec_dot_type).
float dot_legacy_ref(GGMLType wtype, int64_t n, const void* w, const void* x);

// Y[m * ldy + n] for m < M, n < N; the fast kernels (AVX-512 VNNI) give the reference's bits.
void matmul_legacy(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K,
                   const void* Xq, int64_t M, float* Y, int64_t ldy, bool use_reference = false);

}  // namespace ggml_order
}  // namespace lll
