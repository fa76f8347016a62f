// ggml_kquant.h — K-quant matmuls in llama.cpp's exact float order (the "llama.cpp numerics"
// mode; model.h: Numerics). Each function takes f32 activations and quantizes them to Q8_K
// itself, as ggml does, and picks the kernel order llama.cpp picks for that batch size M.
#pragma once
#include <stdint.h>
#include "../threadpool.h"

namespace lll {
namespace ggml_order {

// Y[m * ldy + n] = Q6_K weight row n (N rows of K elements, GGUF layout) . f32 activation row m
// (M rows, row stride K), bit-identical to llama.cpp's CPU backend for any M (ggml_q6k.cpp).
// use_reference: the scalar code, which the AVX-512 kernel matches bit for bit (for tests).
void matmul_q6_K(ThreadPool& pool, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y,
                 int64_t ldy, bool use_reference = false);

}  // namespace ggml_order
}  // namespace lll
