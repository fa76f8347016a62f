// host_check.cu — the device code of quant_formats.cuh run on the host, so that a machine with
// no GPU can check it: the decode path's arithmetic (q8_1 activations, per-group int8 dot
// products, scale and min per group) and the exact dequantization. Used by
// tests/cuda_host_check.py, which tests/cuda_compile_check.sh runs after building with the
// registry's nvcc. Not used by the forward.
#include <math.h>
#include <vector>
#include "common.cuh"
#include "quant_formats.cuh"

namespace lll {
namespace cuda {

// One 32-value block of activations to q8_1, as k_quantize_q8_1 does it on the device.
static block_q8_1 quantize_block_q8_1(const float* x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    block_q8_1 b;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
        const int q = amax == 0.0f ? 0 : (int)rintf(x[j] / d);
        b.qs[j] = (int8_t)q;
        sum += q;
    }
    b.d = f32_to_fp16(d);
    b.s = f32_to_fp16(d * (float)sum);
    return b;
}

template <GGMLType T>
static void host_decode_matmul(const uint8_t* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t M,
                               float* y) {
    const int64_t G = K / 32;
    std::vector<block_q8_1> xq(M * G);
    for (int64_t i = 0; i < M * G; ++i) xq[i] = quantize_block_q8_1(x + 32 * i);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const uint8_t* row = w + n * row_bytes;
            float acc = 0.0f;
            if constexpr (kPlain<T>) {
                for (int64_t k = 0; k < K; ++k) acc += load_plain<T>(row, k) * x[m * K + k];
            } else {
                using Q = QT<T>;
                constexpr int kGroups = Q::kElems / 32;
                const auto* blocks = reinterpret_cast<const typename Q::Block*>(row);
                for (int64_t g = 0; g < G; ++g)
                    acc += Q::dot(blocks[g / kGroups], (int)(g % kGroups), act_q8(xq[m * G + g]));
            }
            y[m * N + n] = acc;
        }
}

}  // namespace cuda
}  // namespace lll

using namespace lll;
using namespace lll::cuda;

extern "C" {

llc_status llc_host_decode_matmul(uint32_t type, const void* w, int64_t N, int64_t K, const float* x, int64_t M,
                                  float* y) {
    const size_t row_bytes = llc_row_bytes(type, K);
    LLC_REQUIRE(llc_matmul_supports(type), "host_decode_matmul: no kernel for type id " + std::to_string(type));
    LLC_REQUIRE(K > 0 && K % 32 == 0 && row_bytes > 0 && N >= 0 && M >= 0, "host_decode_matmul: bad shape");
    dispatch_type(type, [&]<GGMLType T>() {
        host_decode_matmul<T>(static_cast<const uint8_t*>(w), row_bytes, N, K, x, M, y);
    });
    return LLC_OK;
}

llc_status llc_host_dequantize(uint32_t type, const void* src, float* y, int64_t n) {
    LLC_REQUIRE(llc_matmul_supports(type), "host_dequantize: no kernel for type id " + std::to_string(type));
    LLC_REQUIRE(n >= 0 && n % 16 == 0 && llc_row_bytes(type, n) > 0, "host_dequantize: not a whole number of blocks");
    dispatch_type(type, [&]<GGMLType T>() {
        for (int64_t c = 0; c < n / 16; ++c) dequant16_row<T>(static_cast<const uint8_t*>(src), c, y + 16 * c);
    });
    return LLC_OK;
}

}  // extern "C"
