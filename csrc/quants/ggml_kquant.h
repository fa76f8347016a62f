// ggml_kquant.h — K-quant weight matmuls in llama.cpp's exact float order (the "llama.cpp
// numerics" mode; model.h: Numerics). Each function takes f32 activations (M rows, row stride K)
// and quantizes them itself, as ggml does, since its kernel choice depends on the batch shape.
#pragma once
#include <stdint.h>
#include "../threadpool.h"

namespace lll {
namespace ggml_order {

// Y[m * ldy + n] = llama.cpp's result for Q4_K weight row n (N rows of K elements, GGUF layout)
// times activation row m, bit for bit, for any M (order: ggml_q4k.cpp). Returns false, computing
// nothing, for shapes llama.cpp does not run through its repacked Q4_K kernels (N % 8 != 0).
// use_reference: the scalar code, which the SIMD path matches bit for bit.
bool matmul_q4_K(ThreadPool& pool, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y,
                 int64_t ldy, bool use_reference = false);

}  // namespace ggml_order
}  // namespace lll
