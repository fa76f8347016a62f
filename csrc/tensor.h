// tensor.h — what the forward pass knows about a weight: type, shape, bytes and placement.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string>
#include "blocks.h"

namespace lll {

// Where a layer's weights and KV blocks live. Only CPU executes today; the forward dispatches on
// this so a CUDA backend can take some layers without touching the architecture files.
enum class Placement : int { CPU = 0, CUDA = 1 };

// A 1-D or 2-D weight viewed in place (in the GGUF mapping; never copied).
// ne0 = row length (elements), ne1 = number of rows, as ggml orders dims.
struct WeightRef {
    std::string name;
    GGMLType type = GGMLType::F32;
    const uint8_t* data = nullptr;
    int64_t ne0 = 0, ne1 = 1;
    size_t row_bytes = 0;
    Placement placement = Placement::CPU;
    bool repacked = false;   // data is matmul.h's repacked layout (16-row panels), not GGUF rows

    bool present() const { return data != nullptr; }
    const float* f32() const { return reinterpret_cast<const float*>(data); }  // F32 vectors
    const uint8_t* row(int64_t i) const { return data + (size_t)i * row_bytes; }
};

}  // namespace lll
