// matmul.h — Y[M, N] = X[M, K] . W[N, K]^T for any weight type, multi-threaded.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/blocks.h"
#include "backends/cpu/quants/quants.h"
#include "common/threadpool.h"

namespace lll {

// Bytes needed to hold M activation rows of K elements quantized to `vec_dot_type`.
size_t act_buffer_bytes(GGMLType vec_dot_type, int64_t M, int64_t K);

// Quantize M rows of K floats (row stride K) to `vec_dot_type` into Xq (act_buffer_bytes).
// Done once per input and reused by every weight that multiplies it (e.g. Q, K and V).
void quantize_activations(ThreadPool& pool, GGMLType vec_dot_type, const float* X, int64_t M,
                          int64_t K, void* Xq, Isa isa);

// Y[m, n] (row stride ldy floats) = dot(W row n, Xq row m). W: N rows of K elements of type
// `wtype`; Xq: M rows already in type_traits(wtype)->vec_dot_type. A row's result never
// depends on M or on which thread computed it (batch invariance).
void matmul_q(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K,
              const void* Xq, int64_t M, float* Y, int64_t ldy, Isa isa);

// Weights repacked once for the block-sequential kernels (quants/bseq.h): same bytes as the
// GGUF rows (padded to whole 16-row panels), laid out per panel so decode streams contiguous
// vectors. The layout is the same at the AVX-512 and AVX2 levels, which run every repackable
// type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) from it.
bool can_repack(GGMLType wtype, Isa isa);   // the type runs block-sequential at this ISA level
size_t repacked_bytes(GGMLType wtype, int64_t N, int64_t K);
void repack_weight(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K, uint8_t* dst);

// matmul_q on a repacked weight (can_repack(wtype, isa) holds): bit-identical to matmul_q on the
// original rows at that level.
void matmul_q_repacked(ThreadPool& pool, GGMLType wtype, const void* Wr, int64_t N, int64_t K,
                       const void* Xq, int64_t M, float* Y, int64_t ldy, Isa isa);

// Several repacked weights applied to the same quantized X (q/k/v, gate/up): one parallel region
// whose threads take panels of all of them in turn, so a decode step pays one hand-off and one
// final wait for the group instead of one per matrix. Every weight needs X's activation type
// and K; each result is bit-identical to matmul_q_repacked's.
struct RepackedMatmul {
    GGMLType wtype;
    const void* Wr;
    int64_t N;
    float* Y;          // [M, ldy]
    int64_t ldy;
};
void matmul_q_repacked_group(ThreadPool& pool, const RepackedMatmul* jobs, int n_jobs, int64_t K,
                             const void* Xq, int64_t M, Isa isa);

// Several GGUF-layout weights of one type that runs tile kernels (runs_tiles: F32, F16, BF16,
// Q2_K, Q3_K, IQ4_*, ...) applied to the same quantized X (q/k/v): one parallel region, each bias
// (f32[N], or null) added to its rows inside it; each Y is bit-identical to matmul_q's followed
// by add_bias_rows.
bool runs_tiles(GGMLType wtype, Isa isa);
struct TileMatmul {
    GGMLType wtype;
    const void* W;     // N rows of K elements, GGUF layout
    int64_t N;
    float* Y;          // [M, ldy]
    int64_t ldy;
    const float* bias;
};
void matmul_q_group(ThreadPool& pool, const TileMatmul* jobs, int n_jobs, int64_t K, const void* Xq, int64_t M,
                    Isa isa);
// Convenience: quantize X then matmul_q into Y (row stride N), with internal scratch.
void matmul(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K,
            const float* X, int64_t M, float* Y, Isa isa);

}  // namespace lll
