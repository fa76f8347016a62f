// tensor.h — what the forward pass knows about a weight: type, shape, bytes and where it lives.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string>
#include <vector>
#include "common/blocks.h"

namespace lll {

// The backend (backends/backend.h) that holds a layer's weights and KV blocks and runs its ops: an
// entry of the backend registry (backends/registry.h) and a device of it. An open id, not a list of
// devices: a backend added to the registry is a placement with no change here. The default is the
// host (the CPU backend, the registry's first entry).
struct Placement {
    int16_t backend = 0;   // index in backend_registry()
    int16_t device = 0;    // device ordinal within that backend
    bool operator==(const Placement& o) const { return backend == o.backend && device == o.device; }
    bool operator!=(const Placement& o) const { return !(*this == o); }
};
const char* placement_name(Placement p);   // its backend's name (backends/registry.cpp)

// The placement of each layer and of the output head (weights.h place_layers).
struct LayerPlacement {
    std::vector<Placement> layers;
    Placement output;
};

// A 1-D or 2-D weight: in the GGUF mapping until its backend places it (backend.h
// place_weights), then in that backend's memory (a repacked arena, host copies, device memory).
// ne0 = row length (elements), ne1 = number of rows, as ggml orders dims.
struct WeightRef {
    std::string name;
    GGMLType type = GGMLType::F32;
    const uint8_t* data = nullptr;
    int64_t ne0 = 0, ne1 = 1;
    size_t row_bytes = 0;
    Placement placement;   // set by the Model from its layer's backend
    bool repacked = false;   // data is matmul.h's repacked layout (16-row panels), not GGUF rows
    // The GGUF tensor it is or is a view of (a fused matrix's part, one expert of a 3-D tensor):
    // what activation statistics (activation_stats.h) are keyed by.
    std::string tensor;
    int32_t expert = -1;     // the expert this view is, of n_expert; -1 for a plain matrix
    int32_t n_expert = 0;

    bool present() const { return data != nullptr; }
    size_t bytes() const { return row_bytes * (size_t)ne1; }
    const float* f32() const { return reinterpret_cast<const float*>(data); }  // F32 vectors
    const uint8_t* row(int64_t i) const { return data + (size_t)i * row_bytes; }
};

}  // namespace lll
