// dequant.cu — exact dequantization on the GPU (llc_dequantize, llc_get_rows): one thread per 16
// elements, through quant_formats.cuh. Built with --fmad=false (cuda/CMakeLists.txt) so that
// d * q + m rounds as the CPU reference does: the results are bit-identical to the CPU's.
#include "common.cuh"
#include "quant_formats.cuh"

namespace lll {
namespace cuda {

// y[16c..16c+15] for every chunk c < n16 of a contiguous run of rows of type T.
template <GGMLType T> __global__ void k_dequantize(const uint8_t* src, float* y, int64_t n16) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= n16) return;
    float v[16];
    dequant16_row<T>(src, c, v);
    for (int j = 0; j < 16; ++j) y[16 * c + j] = v[j];
}

// out[t][16c..] of row ids[t]; blockIdx.y = t.
template <GGMLType T>
__global__ void k_get_rows(const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k, const int32_t* ids,
                           float* out) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t t = blockIdx.y;
    if (c >= k / 16) return;
    const int32_t id = ids[t];
    float v[16] = {};
    if (id >= 0 && id < n_rows) dequant16_row<T>(w + id * row_bytes, c, v);
    for (int j = 0; j < 16; ++j) out[t * k + 16 * c + j] = v[j];
}

}  // namespace cuda
}  // namespace lll

using namespace lll;
using namespace lll::cuda;

extern "C" {

int llc_matmul_supports(uint32_t type) {
    return dispatch_type(type, [&]<GGMLType T>() { (void)T; }) ? 1 : 0;
}

size_t llc_row_bytes(uint32_t type, int64_t k) {
    const TypeTraits* tt = type_traits(type);
    if (!tt || k < 0 || k % tt->block_elems) return 0;
    return (size_t)(k / tt->block_elems) * tt->block_bytes;
}

llc_status llc_dequantize(uint32_t type, const void* src, float* y, int64_t n, llc_stream s) {
    LLC_REQUIRE(llc_matmul_supports(type), "dequantize: no CUDA kernel for type id " + std::to_string(type));
    LLC_REQUIRE(n >= 0 && n % 16 == 0 && llc_row_bytes(type, n) > 0,
                "dequantize: " + std::to_string(n) + " elements is not a whole number of blocks");
    const int64_t n16 = n / 16;
    if (n16 == 0) return LLC_OK;
    dispatch_type(type, [&]<GGMLType T>() {
        k_dequantize<T><<<blocks_for(n16, 256), 256, 0, s>>>((const uint8_t*)src, y, n16);
    });
    return launched("dequantize");
}

llc_status llc_get_rows(uint32_t type, const void* w, int64_t n_rows, int64_t k, const int32_t* ids,
                        int64_t T, float* out, llc_stream s) {
    LLC_REQUIRE(llc_matmul_supports(type), "get_rows: no CUDA kernel for type id " + std::to_string(type));
    const size_t row_bytes = llc_row_bytes(type, k);
    LLC_REQUIRE(k > 0 && k % 16 == 0 && row_bytes > 0, "get_rows: row length " + std::to_string(k) +
                                                           " is not a whole number of blocks");
    LLC_REQUIRE(T >= 0 && T <= 65535, "get_rows: " + std::to_string(T) + " rows (at most 65535 per call)");
    if (T == 0) return LLC_OK;
    const dim3 grid(blocks_for(k / 16, 128), (unsigned)T);
    dispatch_type(type, [&]<GGMLType TT>() {
        k_get_rows<TT><<<grid, 128, 0, s>>>((const uint8_t*)w, (int64_t)row_bytes, n_rows, k, ids, out);
    });
    return launched("get_rows");
}

}  // extern "C"
