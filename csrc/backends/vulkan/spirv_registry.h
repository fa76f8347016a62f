// spirv_registry.h — the SPIR-V modules glslc compiled from vulkan/shaders/ at build time,
// embedded in _core by vulkan/embed_spirv.cmake (one per kernel family and block type, named
// e.g. "linear_matvec_q4_k").
#pragma once
#include <stddef.h>

namespace lll::vk {

struct SpirvBlob {
    const char* name;
    const unsigned char* code;   // 4-byte aligned SPIR-V words
    size_t size;                 // bytes
};

extern const SpirvBlob k_spirv_blobs[];
extern const size_t k_spirv_blob_count;

}  // namespace lll::vk
