// footprint.h — the bytes a backend allocates, as functions of the model and the options. The
// allocators (backend_cpu.cpp, kv_cache.cpp) size their buffers with these, and the planner
// (python/localllm/plan.py through _core.memory_footprint) predicts with the same ones, so a
// plan is what loading then allocates.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <vector>
#include "common/blocks.h"
#include "model/tensor.h"

namespace lll {

struct HParams;
enum class Numerics : int;
enum class Isa : int;

// ---- CPU ----
// Whether the CPU backend repacks this matrix (the one place this is decided): a
// block-sequential type at this ISA, not read by a llama.cpp-order kernel, and repacking not
// turned off with LOCALLLM_NO_REPACK=1. Other matrices stay in the file mapping.
bool cpu_repacks(const WeightRef& w, Isa isa, Numerics numerics);
// Offset of each matrix in the CPU's repacked arena (0 for those not repacked) and its total.
size_t cpu_repack_layout(const std::vector<const WeightRef*>& matrices, Isa isa, Numerics numerics,
                         std::vector<size_t>* offsets);
// Host copies of the norm vectors and biases: made when anything is repacked (model.cpp says why).
size_t cpu_vector_copy_bytes(const std::vector<const WeightRef*>& vectors);
// Quantized-activation scratch for T rows of the widest input of these matrices.
size_t cpu_act_quant_bytes(const HParams& hp, const std::vector<const WeightRef*>& matrices, int64_t T);

// ---- every backend ----
// Float activations of one forward of T tokens (backend.h ActScratch).
size_t act_scratch_floats(const HParams& hp, int64_t T);

// ---- the whole of one backend ----
struct DeviceBytes {
    size_t weights = 0, kv = 0, scratch = 0;
};
struct PlacedWeights;
struct KVTypes;
// What the backend at `p` allocates for these weights (n_layers of them), a KV pool of
// kv_blocks blocks of kv_block_size slots of these types, and batches of up to T tokens.
DeviceBytes device_bytes(Placement p, const HParams& hp, const PlacedWeights& pw, int64_t kv_blocks,
                         int kv_block_size, const KVTypes& kv_types, int64_t T, Isa isa, Numerics numerics);

// ---- CUDA ----
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

}  // namespace lll
