// ref_dispatch.cpp — the public reference conversions of quants.h: validate, then hand the row
// to the type's kernel from the type registry (type_registry.cpp).
#include <stdexcept>
#include <string>

#include "common/blocks.h"
#include "backends/cpu/quants/quants.h"
#include "backends/cpu/quants/ref/ref_rows.h"

namespace lll {

namespace {

std::string type_label(GGMLType type) {
    const char* name = ggml_type_name(static_cast<uint32_t>(type));
    const std::string id = std::to_string(static_cast<uint32_t>(type));
    return name ? std::string(name) + " (type id " + id + ")" : "type id " + id;
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
    const TypeTraits* tt = type_traits(type);
    if (!tt || !tt->dequantize) {
        throw std::invalid_argument("dequantize: unsupported tensor type " + type_label(type));
    }
    check_elements("dequantize", type, n);
    if (n > 0) tt->dequantize(src, dst, n);
}

void quantize_row_ref(GGMLType type, const float* src, void* dst, int64_t n) {
    const TypeTraits* tt = type_traits(type);
    if (!tt || !tt->quantize) {
        throw std::invalid_argument("quantize: cannot quantize f32 to " + type_label(type));
    }
    check_elements("quantize", type, n);
    if (n > 0) tt->quantize(src, dst, n);
}

void quantize_row_weighted(GGMLType type, const float* src, void* dst, int64_t n, const float* importance) {
    const TypeTraits* tt = type_traits(type);
    if (!tt || (!tt->quantize && !tt->quantize_weighted)) {
        throw std::invalid_argument("quantize: cannot quantize f32 to " + type_label(type));
    }
    check_elements("quantize", type, n);
    if (!importance && !tt->quantize) {
        throw std::invalid_argument(std::string("quantize: ") + tt->name + " needs an importance matrix (--imatrix)");
    }
    if (n == 0) return;
    if (importance && tt->quantize_weighted) tt->quantize_weighted(src, dst, n, importance);
    else tt->quantize(src, dst, n);
}

bool can_quantize(GGMLType type) {
    const TypeTraits* tt = type_traits(type);
    return tt && tt->quantize;
}

}  // namespace lll
