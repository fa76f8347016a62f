// matmul.cu — y[M][N] = x[M][K] . w[N][K]^T for GGUF weight rows (llc_matmul).
//
// Decode path (M <= 8 rows a launch): the activations are quantized per 32 to q8_1 and each warp
// sums one weight row's int8 dot products (quant_formats.cuh) for all M rows at once, so the
// weight is read once per step; F32/F16/BF16 weights take a float dot product instead.
// Prompt path: 64x64 output tiles on the tensor cores (WMMA, F16 inputs, F32 accumulation), each
// 32-wide K slice of the weight tile dequantized to F16 in shared memory, so no F16 copy of the
// weight is ever stored.
#include <mma.h>
#include <cuda_fp16.h>
#include "common.cuh"
#include "quant_formats.cuh"

namespace lll {
namespace cuda {

constexpr int kDecodeMaxRows = 8;     // activation rows one decode launch takes
constexpr int kDecodeWarps = 4;       // weight rows (one a warp) per block

// x[rows][K] (f32) -> q8_1 blocks [rows][K/32]: d = amax/127, q = round(x/d), s = d * sum(q),
// as the CPU quantizes Q8_1 activations. One warp per block of 32.
__global__ void k_quantize_q8_1(const float* x, block_q8_1* y, int64_t n_blocks) {
    const int64_t ib = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (ib >= n_blocks) return;
    const float v = x[ib * 32 + lane];
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
    int sum = q;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    y[ib].qs[lane] = (int8_t)q;
    if (lane == 0) {
        y[ib].d = f32_to_fp16(d);
        y[ib].s = f32_to_fp16(d * (float)sum);
    }
}

// One warp per weight row n: y[m][n] for the M activation rows (q8_1, [M][K/32]).
template <GGMLType T, int M>
__global__ void __launch_bounds__(32 * kDecodeWarps)
k_mmvq(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K, const block_q8_1* xq, float* y, int64_t ldy) {
    using Q = QT<T>;
    constexpr int kGroups = Q::kElems / 32;   // 32-element groups per weight block
    const int64_t n = blockIdx.x * (int64_t)kDecodeWarps + threadIdx.y;
    if (n >= N) return;
    const int lane = threadIdx.x;
    const auto* blocks = reinterpret_cast<const typename Q::Block*>(w + n * row_bytes);
    const int64_t G = K / 32;
    float acc[M] = {};
    for (int64_t g = lane; g < G; g += 32) {
        const typename Q::Block& b = blocks[g / kGroups];
#pragma unroll
        for (int m = 0; m < M; ++m) acc[m] += Q::dot(b, (int)(g % kGroups), act_q8(xq[m * G + g]));
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) y[m * ldy + n] = v;
    }
}

// F32/F16/BF16 weights: one warp per weight row, float dot products with the f32 activations.
template <GGMLType T, int M>
__global__ void __launch_bounds__(32 * kDecodeWarps)
k_mmv_plain(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K, const float* x, float* y, int64_t ldy) {
    const int64_t n = blockIdx.x * (int64_t)kDecodeWarps + threadIdx.y;
    if (n >= N) return;
    const int lane = threadIdx.x;
    const uint8_t* row = w + n * row_bytes;
    float acc[M] = {};
    for (int64_t k = lane; k < K; k += 32) {
        const float wk = load_plain<T>(row, k);
#pragma unroll
        for (int m = 0; m < M; ++m) acc[m] += wk * x[m * K + k];
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) y[m * ldy + n] = v;
    }
}

// Prompt path tile: 64 activation rows x 64 weight rows, K in slices of 32; 4 warps, each a
// 32x32 quarter of the tile as 2x2 WMMA 16x16x16 fragments.
constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
constexpr int kTilePad = 8;           // halves of padding per shared row (WMMA needs ldm % 8 == 0)
constexpr int kGemmThreads = 128;

template <GGMLType T>
__global__ void __launch_bounds__(kGemmThreads)
k_gemm_wmma(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K, const float* x, int64_t M, float* y) {
    using namespace nvcuda;
    __shared__ __align__(32) __half xs[kTileM][kTileK + kTilePad];   // [m][k] activations
    __shared__ __align__(32) __half ws[kTileN][kTileK + kTilePad];   // [n][k] weights
    __shared__ __align__(32) float cs[kTileM][kTileN + 4];           // [m][n] result tile
    const int tid = threadIdx.x, warp = tid / 32;
    const int64_t m0 = (int64_t)blockIdx.y * kTileM, n0 = (int64_t)blockIdx.x * kTileN;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;          // this warp's quarter
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    const int r = tid / 2, h = tid % 2;                            // row and 16-wide half loaded
    for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
        float v[16];
        if (m0 + r < M) {
            const float* xr = x + (m0 + r) * K + k0 + 16 * h;
            for (int j = 0; j < 16; ++j) v[j] = xr[j];
        } else {
            for (int j = 0; j < 16; ++j) v[j] = 0.0f;
        }
        for (int j = 0; j < 16; ++j) xs[r][16 * h + j] = __float2half_rn(v[j]);
        if (n0 + r < N) dequant16_row<T>(w + (n0 + r) * row_bytes, k0 / 16 + h, v);
        else for (int j = 0; j < 16; ++j) v[j] = 0.0f;
        for (int j = 0; j < 16; ++j) ws[r][16 * h + j] = __float2half_rn(v[j]);
        __syncthreads();
        for (int kk = 0; kk < kTileK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &xs[wm + 16 * i][kk], kTileK + kTilePad);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &ws[wn + 16 * j][kk], kTileK + kTilePad);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(&cs[wm + 16 * i][wn + 16 * j], acc[i][j], kTileN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < kTileM * kTileN; e += kGemmThreads) {
        const int mi = e / kTileN, ni = e % kTileN;
        if (m0 + mi < M && n0 + ni < N) y[(m0 + mi) * N + n0 + ni] = cs[mi][ni];
    }
}

template <GGMLType T, int M>
void launch_decode_rows(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K, const float* x,
                        const block_q8_1* xq, float* y, llc_stream s) {
    const dim3 block(32, kDecodeWarps);
    const unsigned grid = blocks_for(N, kDecodeWarps);
    if constexpr (kPlain<T>) k_mmv_plain<T, M><<<grid, block, 0, s>>>(w, row_bytes, N, K, x, y, N);
    else k_mmvq<T, M><<<grid, block, 0, s>>>(w, row_bytes, N, K, xq, y, N);
}

// Rows [m0, m0 + rows) of the decode path, rows <= kDecodeMaxRows.
template <GGMLType T>
void launch_decode(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K, const float* x, const block_q8_1* xq,
                   int64_t rows, float* y, llc_stream s) {
    switch (rows) {
        case 1: launch_decode_rows<T, 1>(w, row_bytes, N, K, x, xq, y, s); break;
        case 2: launch_decode_rows<T, 2>(w, row_bytes, N, K, x, xq, y, s); break;
        case 3: launch_decode_rows<T, 3>(w, row_bytes, N, K, x, xq, y, s); break;
        case 4: launch_decode_rows<T, 4>(w, row_bytes, N, K, x, xq, y, s); break;
        case 5: launch_decode_rows<T, 5>(w, row_bytes, N, K, x, xq, y, s); break;
        case 6: launch_decode_rows<T, 6>(w, row_bytes, N, K, x, xq, y, s); break;
        case 7: launch_decode_rows<T, 7>(w, row_bytes, N, K, x, xq, y, s); break;
        default: launch_decode_rows<T, 8>(w, row_bytes, N, K, x, xq, y, s); break;
    }
}

bool plain_type(uint32_t type) {
    const GGMLType t = static_cast<GGMLType>(type);
    return t == GGMLType::F32 || t == GGMLType::F16 || t == GGMLType::BF16;
}

llc_matmul_path resolve_path(llc_matmul_path path, int64_t M) {
    if (path != LLC_MATMUL_AUTO) return path;
    return M <= kDecodeMaxRows ? LLC_MATMUL_DECODE : LLC_MATMUL_PROMPT;
}

}  // namespace cuda
}  // namespace lll

using namespace lll;
using namespace lll::cuda;

extern "C" {

size_t llc_matmul_scratch_bytes(uint32_t type, int64_t k, int64_t M, llc_matmul_path path) {
    if (resolve_path(path, M) != LLC_MATMUL_DECODE || plain_type(type) || k % 32) return 0;
    return (size_t)M * (size_t)(k / 32) * sizeof(block_q8_1);
}

llc_status llc_matmul(uint32_t type, const void* w, int64_t N, int64_t K, const float* x, int64_t M, float* y,
                      void* scratch, size_t scratch_bytes, llc_matmul_path path, llc_stream s) {
    LLC_REQUIRE(llc_matmul_supports(type), "matmul: no CUDA kernel for type id " + std::to_string(type));
    const size_t row_bytes = llc_row_bytes(type, K);
    LLC_REQUIRE(K > 0 && K % 32 == 0 && row_bytes > 0,
                "matmul: K = " + std::to_string(K) + " is not a positive whole number of blocks (and of 32)");
    LLC_REQUIRE(N >= 0 && M >= 0, "matmul: negative N or M");
    LLC_REQUIRE(path >= LLC_MATMUL_AUTO && path <= LLC_MATMUL_PROMPT, "matmul: unknown path");
    if (N == 0 || M == 0) return LLC_OK;
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    if (resolve_path(path, M) == LLC_MATMUL_PROMPT) {
        LLC_REQUIRE((M + kTileM - 1) / kTileM <= 65535, "matmul: too many activation rows for one call");
        const dim3 grid(blocks_for(N, kTileN), blocks_for(M, kTileM));
        dispatch_type(type, [&]<GGMLType T>() {
            k_gemm_wmma<T><<<grid, kGemmThreads, 0, s>>>(wb, (int64_t)row_bytes, N, K, x, M, y);
        });
        return launched("matmul (prompt path)");
    }
    const size_t need = llc_matmul_scratch_bytes(type, K, M, LLC_MATMUL_DECODE);
    LLC_REQUIRE(scratch_bytes >= need, "matmul: scratch of " + std::to_string(scratch_bytes) + " bytes, " +
                                           std::to_string(need) + " needed");
    block_q8_1* xq = static_cast<block_q8_1*>(scratch);
    const int64_t G = K / 32;
    if (need) {
        k_quantize_q8_1<<<blocks_for(M * G * 32, 256), 256, 0, s>>>(x, xq, M * G);
        if (llc_status st = launched("matmul (quantize activations)")) return st;
    }
    for (int64_t m0 = 0; m0 < M; m0 += kDecodeMaxRows) {
        const int64_t rows = M - m0 < kDecodeMaxRows ? M - m0 : kDecodeMaxRows;
        dispatch_type(type, [&]<GGMLType T>() {
            launch_decode<T>(wb, (int64_t)row_bytes, N, K, x + m0 * K, xq + m0 * G, rows, y + m0 * N, s);
        });
        if (llc_status st = launched("matmul (decode path)")) return st;
    }
    return LLC_OK;
}

}  // extern "C"
