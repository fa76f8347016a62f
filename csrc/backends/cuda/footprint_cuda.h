// footprint_cuda.h — the bytes the CUDA backend allocates: its registry entry's footprint and
// what backend_cuda.cpp sizes its buffers by. Plain host code (no CUDA API), compiled into every
// build, so a build without CUDA can still plan for one.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backends/registry.h"
#include "model/tensor.h"

namespace lll {

// The rule a CUDA backend allocates by: every weight in its GGUF bytes (no repacking), each
// rounded up to kCudaWeightAlign in one arena; the same KV blocks and float activations as the
// CPU; and, for batches of up to T tokens, the buffers cuda_scratch_parts lists.
constexpr size_t kCudaWeightAlign = 256;
size_t cuda_weight_bytes(const WeightRef& w);
struct CudaScratchParts {
    size_t activations = 0;   // act_scratch_floats(T) F32
    size_t logits = 0;        // [T, n_vocab] F32
    size_t rope_tables = 0;   // two [T, rope_dims] (cos, sin) tables: Gemma3 alternates two bases
    size_t act_q8 = 0;        // q8_1 activations of the decode matmul: min(T, 8) rows of the widest input
    size_t batch_ids = 0;     // tokens, positions, seq_of_token [T] and attention tiles [2T], int32
    size_t total() const { return activations + logits + rope_tables + act_q8 + batch_ids; }
};
// The decode matmul's row limit (cuda/cuda_api.h: LLC_MATMUL_AUTO takes the decode path up to 8 rows).
constexpr int64_t kCudaDecodeRows = 8;
CudaScratchParts cuda_scratch_parts(const HParams& hp, int64_t T);
size_t cuda_scratch_bytes(const HParams& hp, int64_t T);

// The registry's footprint: every weight placed on it, and the scratch of cuda_scratch_parts.
WeightsScratchBytes cuda_footprint(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa, Numerics numerics);

}  // namespace lll
