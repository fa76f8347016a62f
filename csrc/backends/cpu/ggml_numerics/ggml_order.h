// ggml_order.h — matmuls in llama.cpp's exact float order (the "llama.cpp numerics" mode;
// model.h: Numerics), one entry point over the per-type kernels:
//   legacy block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)  ggml_legacy.cpp
//   Q4_K (llama.cpp's repacked 8-row kernels)          ggml_q4k.cpp
//   Q6_K (its tiled kernel from 8 rows, vec_dot below)  ggml_q6k.cpp
// Each reproduces llama.cpp's CPU results bit for bit for any batch size M (llama.cpp's kernel
// choice depends on M, so the K-quant ones take f32 activations and quantize them as ggml does),
// and each has a scalar reference its SIMD path is held to (use_reference).
#pragma once
#include <stdint.h>
#include <functional>
#include "backends/cpu/quants/quants.h"
#include "common/threadpool.h"
#include "backends/cpu/ggml_numerics/ggml_legacy.h"

namespace lll {
namespace ggml_order {

// Y[m * ldy + n] = Q6_K weight row n (N rows of K elements, GGUF layout) . f32 activation row m
// (M rows, row stride K), bit-identical to llama.cpp's CPU backend for any M.
void matmul_q6_K(ThreadPool& pool, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y,
                 int64_t ldy, bool use_reference = false);

// The same for Q4_K. Returns false, computing nothing, for shapes llama.cpp does not run through
// its repacked Q4_K kernels (N % 8 != 0).
bool matmul_q4_K(ThreadPool& pool, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y,
                 int64_t ldy, bool use_reference = false);

// Shared by the kernels: fn(n0, n1) over weight rows [0, N) in runs of `run`, the pool's threads
// taking runs from a shared counter (which thread computes a row changes none of its bits); on
// the calling thread alone when the job (`work`, about N * K * M) is small.
void for_row_runs(ThreadPool& pool, int64_t N, int64_t run, int64_t work,
                  const std::function<void(int64_t n0, int64_t n1)>& fn);
// M rows of X quantized to `type` as ggml's x86 code rounds them, in a buffer of the calling
// thread reused across calls (valid until its next call).
const uint8_t* quantized_activations(ThreadPool& pool, GGMLType type, const float* X, int64_t M, int64_t K);

// Whether a weight of this type and row count has a llama.cpp-order kernel.
bool supported(GGMLType wtype, int64_t N);

// Y = X . W^T in llama.cpp's order for any supported type (legacy types quantize X to their
// vec_dot_type first, on the pool). Throws std::invalid_argument for unsupported ones.
void matmul(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K, const float* X, int64_t M,
            float* Y, int64_t ldy, bool use_reference = false);

}  // namespace ggml_order
}  // namespace lll
