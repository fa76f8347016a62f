// footprint_cpu.h — the bytes the CPU backend allocates (its registry entry's footprint, and
// what backend_cpu.cpp sizes its buffers by).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <vector>
#include "backends/registry.h"
#include "model/tensor.h"

namespace lll {

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

// The registry's footprint: the repacked arena and vector copies, and the activation scratch.
WeightsScratchBytes cpu_footprint(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa, Numerics numerics);

}  // namespace lll
