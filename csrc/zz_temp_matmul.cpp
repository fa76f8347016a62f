// TEMPORARY (not committed): float fallback to debug the forward until the kernels land.
#include <string.h>
#include <vector>
#include "matmul.h"
#include "threadpool.h"
namespace lll {
Isa best_isa() { return Isa::Scalar; }
bool isa_available(Isa isa) { return isa == Isa::Scalar; }
const char* isa_name(Isa) { return "temp"; }
struct ThreadPool::Impl {};
ThreadPool::ThreadPool(int) : impl_(nullptr) {}
ThreadPool::~ThreadPool() {}
int ThreadPool::size() const { return 1; }
void ThreadPool::run(const std::function<void(int, int)>& fn) { fn(0, 1); }
size_t act_buffer_bytes(GGMLType, int64_t M, int64_t K) { return M * K * 4; }
void quantize_activations(ThreadPool&, GGMLType, const float* X, int64_t M, int64_t K, void* Xq, Isa) {
    memcpy(Xq, X, M * K * 4);
}
void matmul_q(ThreadPool&, GGMLType wtype, const void* W, int64_t N, int64_t K, const void* Xq, int64_t M,
              float* Y, int64_t ldy, Isa) {
    const TypeTraits* tt = type_traits(wtype);
    const size_t rb = K / tt->block_elems * tt->block_bytes;
    std::vector<float> w(K);
    const float* X = (const float*)Xq;
    for (int64_t n = 0; n < N; ++n) {
        dequantize_row(wtype, (const uint8_t*)W + n * rb, w.data(), K);
        for (int64_t m = 0; m < M; ++m) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += (double)w[k] * X[m * K + k];
            Y[m * ldy + n] = (float)s;
        }
    }
}
void matmul(ThreadPool& p, GGMLType wtype, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y, Isa isa) {
    matmul_q(p, wtype, W, N, K, X, M, Y, N, isa);
}
}
