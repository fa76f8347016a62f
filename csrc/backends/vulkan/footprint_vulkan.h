// footprint_vulkan.h — the bytes the Vulkan backend allocates: its registry entry's footprint and
// what backend_vulkan.cpp sizes its buffers by. Plain host code, compiled into every build, so a
// build without Vulkan can still plan for one. The allocation pattern differs from CUDA's (one
// buffer per weight and per activation instead of arenas; q8_1 activations only for the
// matrix-vector rows), so the rule is its own rather than the CUDA one.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backends/registry.h"
#include "model/tensor.h"

namespace lll {

// Every weight in its GGUF bytes (no repacking), one buffer each; the same KV blocks and float
// activations as the CPU (one buffer per ActScratch field); and, for batches of up to T tokens,
// the buffers vulkan_scratch_parts lists.
struct VulkanScratchParts {
    size_t activations = 0;   // act_scratch_floats(T) F32
    size_t logits = 0;        // [vulkan_logits_rows(T), n_vocab] F32
    size_t rope_tables = 0;   // two [T, rope_dims] (cos, sin) tables: Gemma3 alternates two bases
    size_t batch_ids = 0;     // tokens, positions, seq_of_token [T] int32
    // The integer-dot kernels' q8_1 activations (the context's scratch: up to T rows of the widest
    // matrix input, as the tiled kernel reads a GPU batch; 32 quants + (d, s) per 32 elements);
    // allocated only on a device that runs them, counted always.
    size_t int8_activations = 0;
    size_t total() const { return activations + logits + rope_tables + batch_ids + int8_activations; }
};
// Tokens the matrix-vector kernels take at once (MAX_COLS in linear_matvec*.comp).
constexpr int64_t kVulkanMatVecTokens = 4;
VulkanScratchParts vulkan_scratch_parts(const HParams& hp, int64_t T);
// The output head's logits go through a buffer of at most this many bytes (a few rows at a time
// for a large vocabulary): half the 128 MiB maxStorageBufferRange every Vulkan device has.
constexpr size_t kVulkanLogitsBytes = 64u << 20;
// Rows of logits that buffer holds for batches of up to T tokens (at least one).
int64_t vulkan_logits_rows(const HParams& hp, int64_t T);

// The registry's footprint: every weight placed on it, and the scratch of vulkan_scratch_parts.
WeightsScratchBytes vulkan_footprint(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa,
                                     Numerics numerics);

}  // namespace lll
