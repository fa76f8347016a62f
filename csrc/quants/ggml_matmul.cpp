// ggml_matmul.cpp — the entry point of ggml_order.h: which llama.cpp-order kernel a weight uses.
#include <stdexcept>
#include <string>
#include <vector>

#include "../matmul.h"
#include "ggml_order.h"

namespace lll {
namespace ggml_order {

bool supported(GGMLType wtype, int64_t N) {
    return legacy_supported(wtype) || wtype == GGMLType::Q6_K || (wtype == GGMLType::Q4_K && N % 8 == 0);
}

void matmul(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K, const float* X, int64_t M,
            float* Y, int64_t ldy, bool use_reference) {
    if (!supported(wtype, N)) {
        const TypeTraits* tt = type_traits(wtype);
        throw std::invalid_argument(std::string("no llama.cpp-order kernel for ") + (tt ? tt->name : "this type") +
                                    " weights of " + std::to_string(N) + " rows");
    }
    if (wtype == GGMLType::Q6_K) return matmul_q6_K(pool, W, N, K, X, M, Y, ldy, use_reference);
    if (wtype == GGMLType::Q4_K) {
        matmul_q4_K(pool, W, N, K, X, M, Y, ldy, use_reference);
        return;
    }
    // Legacy types: activations to the weight's vec_dot_type as ggml's x86 code rounds them.
    const GGMLType vdt = type_traits(wtype)->vec_dot_type;
    thread_local std::vector<uint8_t> xq;
    xq.resize(act_buffer_bytes(vdt, M, K));
    quantize_activations(pool, vdt, X, M, K, xq.data(), best_isa());
    matmul_legacy(pool, wtype, W, N, K, xq.data(), M, Y, ldy, use_reference);
}

}  // namespace ggml_order
}  // namespace lll
