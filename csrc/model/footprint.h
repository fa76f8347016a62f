// footprint.h — the bytes a backend allocates, as functions of the model and the options. The
// allocators (each backend's, kv_cache.cpp) size their buffers with these, and the planner
// (python/localllm/plan.py through _core.Footprint) predicts with the same ones, so a plan is
// what loading then allocates. Each backend's own rule is its registry entry's footprint
// (backends/cpu/footprint_cpu.h, backends/cuda/footprint_cuda.h); KV and activations are common.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "model/tensor.h"

namespace lll {

struct HParams;
enum class Numerics : int;
enum class Isa : int;

// ---- every backend ----
// Float activations of one forward of T tokens (backend.h ActScratch).
size_t act_scratch_floats(const HParams& hp, int64_t T);

// ---- the whole of one backend ----
struct DeviceBytes {
    size_t weights = 0, kv = 0, scratch = 0;
};
struct PlacedWeights;
struct KVTypes;
// What the backend at `p` allocates for these weights (n_layers of them), a KV pool of kv_blocks
// blocks of kv_block_size slots of these types, and batches of up to T tokens: its registry
// entry's footprint plus the KV pool.
DeviceBytes device_bytes(Placement p, const HParams& hp, const PlacedWeights& pw, int64_t kv_blocks,
                         int kv_block_size, const KVTypes& kv_types, int64_t T, Isa isa, Numerics numerics);

}  // namespace lll
