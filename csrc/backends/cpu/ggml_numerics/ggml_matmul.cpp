// ggml_matmul.cpp — the entry point of ggml_order.h (which llama.cpp-order kernel a weight uses)
// and the pieces its kernels share.
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cpu/ggml_numerics/ggml_order.h"

namespace lll {
namespace ggml_order {

void for_row_runs(ThreadPool& pool, int64_t N, int64_t run, int64_t work,
                  const std::function<void(int64_t n0, int64_t n1)>& fn) {
    std::atomic<int64_t> next{0};
    auto each_thread = [&](int, int) {
        for (int64_t n0; (n0 = next.fetch_add(run, std::memory_order_relaxed)) < N;) fn(n0, std::min(N, n0 + run));
    };
    if (pool.size() > 1 && work >= (1 << 15) && N > run) pool.run(each_thread);
    else each_thread(0, 1);
}

const uint8_t* quantized_activations(ThreadPool& pool, GGMLType type, const float* X, int64_t M, int64_t K) {
    thread_local std::vector<uint8_t> buf;
    buf.resize(act_buffer_bytes(type, M, K));
    quantize_activations(pool, type, X, M, K, buf.data(), best_isa());
    return buf.data();
}

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
    const uint8_t* xq = quantized_activations(pool, type_traits(wtype)->vec_dot_type, X, M, K);
    matmul_legacy(pool, wtype, W, N, K, xq, M, Y, ldy, use_reference);
}

}  // namespace ggml_order
}  // namespace lll
