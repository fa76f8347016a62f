// ref_dispatch.cpp — the public reference conversions of quants.h: validate, then hand the row
// to the per-format kernel of ref_legacy.cpp / ref_kquants.cpp.
#include <stdexcept>
#include <string>

#include "blocks.h"
#include "quants.h"
#include "quants/ref_rows.h"

namespace lll {

namespace {

struct RefKernels {
    ref::DequantizeFn dequantize;   // never null for a type this runtime knows
    ref::QuantizeFn quantize;       // null when f32 -> type is not supported
};

// Kernels of a type id; both null for an unknown id.
RefKernels kernels_for(GGMLType type) {
    switch (type) {
        case GGMLType::F32: return {ref::dequantize_f32, ref::quantize_f32};
        case GGMLType::F16: return {ref::dequantize_f16, ref::quantize_f16};
        case GGMLType::BF16: return {ref::dequantize_bf16, ref::quantize_bf16};
        case GGMLType::Q4_0: return {ref::dequantize_q4_0, ref::quantize_q4_0};
        case GGMLType::Q4_1: return {ref::dequantize_q4_1, ref::quantize_q4_1};
        case GGMLType::Q5_0: return {ref::dequantize_q5_0, ref::quantize_q5_0};
        case GGMLType::Q5_1: return {ref::dequantize_q5_1, ref::quantize_q5_1};
        case GGMLType::Q8_0: return {ref::dequantize_q8_0, ref::quantize_q8_0};
        case GGMLType::Q8_1: return {ref::dequantize_q8_1, ref::quantize_q8_1};
        case GGMLType::Q2_K: return {ref::dequantize_q2_K, ref::quantize_q2_K};
        case GGMLType::Q3_K: return {ref::dequantize_q3_K, ref::quantize_q3_K};
        case GGMLType::Q4_K: return {ref::dequantize_q4_K, ref::quantize_q4_K};
        case GGMLType::Q5_K: return {ref::dequantize_q5_K, ref::quantize_q5_K};
        case GGMLType::Q6_K: return {ref::dequantize_q6_K, ref::quantize_q6_K};
        case GGMLType::Q8_K: return {ref::dequantize_q8_K, ref::quantize_q8_K};
        // Integer / f64 tensors can be read as floats, but f32 -> int has no ggml meaning.
        case GGMLType::I8: return {ref::dequantize_i8, nullptr};
        case GGMLType::I16: return {ref::dequantize_i16, nullptr};
        case GGMLType::I32: return {ref::dequantize_i32, nullptr};
        case GGMLType::I64: return {ref::dequantize_i64, nullptr};
        case GGMLType::F64: return {ref::dequantize_f64, nullptr};
    }
    return {nullptr, nullptr};
}

std::string type_label(GGMLType type) {
    const TypeTraits* tt = type_traits(type);
    const std::string id = std::to_string(static_cast<uint32_t>(type));
    return tt ? std::string(tt->name) + " (type id " + id + ")" : "type id " + id;
}

// Throws std::invalid_argument unless n is a non-negative multiple of the type's block size.
void check_elements(const char* what, GGMLType type, int64_t n) {
    const TypeTraits* tt = type_traits(type);
    if (n < 0) {
        throw std::invalid_argument(std::string(what) + ": negative element count " +
                                    std::to_string(n));
    }
    if (n % tt->block_elems != 0) {
        throw std::invalid_argument(std::string(what) + ": element count " + std::to_string(n) +
                                    " is not a multiple of the " + tt->name + " block size " +
                                    std::to_string(tt->block_elems));
    }
}

}  // namespace

void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n) {
    const RefKernels kernels = kernels_for(type);
    if (!kernels.dequantize || !type_traits(type)) {
        throw std::invalid_argument("dequantize: unsupported tensor type " + type_label(type));
    }
    check_elements("dequantize", type, n);
    if (n > 0) kernels.dequantize(src, dst, n);
}

void quantize_row_ref(GGMLType type, const float* src, void* dst, int64_t n) {
    const RefKernels kernels = kernels_for(type);
    if (!kernels.quantize || !type_traits(type)) {
        throw std::invalid_argument("quantize: cannot quantize f32 to " + type_label(type));
    }
    check_elements("quantize", type, n);
    if (n > 0) kernels.quantize(src, dst, n);
}

bool can_quantize(GGMLType type) {
    return type_traits(type) != nullptr && kernels_for(type).quantize != nullptr;
}

}  // namespace lll
