// dequant.cu — block dequantization on the GPU, one thread per 32-element group, reading the
// same block structs (csrc/blocks.h) as the CPU code.
#include <cuda_runtime.h>
#include <stdexcept>
#include <string>
#include "blocks.h"
#include "cuda_api.h"
#include "fp16.h"

namespace lll {
namespace cuda {

static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

// Each thread writes the 32 outputs of group g.
__global__ void k_q4_0(const block_q4_0* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const float d = fp16_to_f32(b[g].d);
    for (int j = 0; j < 16; ++j) {
        y[g * 32 + j] = ((b[g].qs[j] & 0x0f) - 8) * d;
        y[g * 32 + j + 16] = ((b[g].qs[j] >> 4) - 8) * d;
    }
}

__global__ void k_q8_0(const block_q8_0* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const float d = fp16_to_f32(b[g].d);
    for (int j = 0; j < 32; ++j) y[g * 32 + j] = b[g].qs[j] * d;
}

__global__ void k_q4_1(const block_q4_1* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const float d = fp16_to_f32(b[g].d), m = fp16_to_f32(b[g].m);
    for (int j = 0; j < 16; ++j) {
        y[g * 32 + j] = (b[g].qs[j] & 0x0f) * d + m;
        y[g * 32 + j + 16] = (b[g].qs[j] >> 4) * d + m;
    }
}

// Q5_0 / Q5_1: bit j of qh is the 5th bit of element j.
__device__ inline uint32_t load_qh(const uint8_t* qh) {
    return qh[0] | (qh[1] << 8) | (qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

__global__ void k_q5_0(const block_q5_0* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const float d = fp16_to_f32(b[g].d);
    const uint32_t qh = load_qh(b[g].qh);
    for (int j = 0; j < 16; ++j) {
        const int lo = (b[g].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
        const int hi = (b[g].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        y[g * 32 + j] = (lo - 16) * d;
        y[g * 32 + j + 16] = (hi - 16) * d;
    }
}

__global__ void k_q5_1(const block_q5_1* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const float d = fp16_to_f32(b[g].d), m = fp16_to_f32(b[g].m);
    const uint32_t qh = load_qh(b[g].qh);
    for (int j = 0; j < 16; ++j) {
        const int lo = (b[g].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
        const int hi = (b[g].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        y[g * 32 + j] = lo * d + m;
        y[g * 32 + j + 16] = hi * d + m;
    }
}

// Q4_K: group g = (super-block g/8, sub-block g%8) of 32 weights.
__device__ inline void q4k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// The 5th bit of element l of sub-block `sub`: none in Q4_K, bit `sub` of qh[l] in Q5_K.
__device__ inline int k_high_bit(const block_q4_K&, int, int) { return 0; }
__device__ inline int k_high_bit(const block_q5_K& blk, int sub, int l) { return ((blk.qh[l] >> sub) & 1) << 4; }

// Q4_K and Q5_K: 6-bit scale and min per sub-block, 4 low bits per weight (+ Q5_K's 5th bit).
template <class Block>
__global__ void k_q45_K(const Block* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const Block& blk = b[g / 8];
    const int sub = (int)(g % 8);
    uint8_t sc, m;
    q4k_scale_min(sub, blk.scales, sc, m);
    const float d = fp16_to_f32(blk.d) * sc, mn = fp16_to_f32(blk.dmin) * m;
    const uint8_t* q = blk.qs + 32 * (sub / 2);
    const int shift = (sub % 2) * 4;
    for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0f) | k_high_bit(blk, sub, l);
        y[g * 32 + l] = d * v - mn;
    }
}

// F16 / BF16: group g = 32 consecutive values.
__global__ void k_f16(const fp16_t* x, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    for (int l = 0; l < 32; ++l) y[g * 32 + l] = fp16_to_f32(x[g * 32 + l]);
}

__global__ void k_bf16(const uint16_t* x, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    for (int l = 0; l < 32; ++l) y[g * 32 + l] = __uint_as_float((uint32_t)x[g * 32 + l] << 16);
}

// Q6_K: group g = (super-block g/8, 32-element group g%8).
__global__ void k_q6_K(const block_q6_K* b, float* y, int64_t n_groups) {
    const int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const block_q6_K& blk = b[g / 8];
    const int grp = (int)(g % 8);
    const int half = grp / 4, quarter = grp % 4;          // 128-element half, 32-element quarter
    const uint8_t* ql = blk.ql + 64 * half;
    const uint8_t* qh = blk.qh + 32 * half;
    const int8_t* sc = blk.scales + 8 * half;
    const float d = fp16_to_f32(blk.d);
    for (int l = 0; l < 32; ++l) {
        const uint8_t qlv = ql[l + 32 * (quarter % 2)];     // quarters 0,1: low nibbles; 2,3: high
        const int low = quarter < 2 ? (qlv & 0x0f) : (qlv >> 4);
        const int high = (qh[l] >> (2 * quarter)) & 3;
        const int q = (low | (high << 4)) - 32;
        y[g * 32 + l] = d * sc[l / 16 + 2 * quarter] * q;
    }
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

std::string device_name(int device) {
    cudaDeviceProp p;
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    return p.name;
}

bool can_dequantize(GGMLType type) {
    switch (type) {
        case GGMLType::Q4_0: case GGMLType::Q4_1: case GGMLType::Q5_0: case GGMLType::Q5_1:
        case GGMLType::Q8_0: case GGMLType::Q4_K: case GGMLType::Q5_K: case GGMLType::Q6_K:
        case GGMLType::F16: case GGMLType::BF16:
            return true;
        default:
            return false;
    }
}

void dequantize(GGMLType type, const void* host_src, float* host_dst, int64_t n) {
    const TypeTraits* tt = type_traits(type);
    if (!tt || !can_dequantize(type)) throw std::invalid_argument("cuda dequantize: unsupported type");
    if (n % 32 || n % tt->block_elems) throw std::invalid_argument("cuda dequantize: n not a multiple of the block size");
    if (device_count() == 0) throw std::runtime_error("cuda: no CUDA device available");
    const size_t src_bytes = (size_t)(n / tt->block_elems) * tt->block_bytes;
    void* d_src = nullptr;
    float* d_dst = nullptr;
    check(cudaMalloc(&d_src, src_bytes), "cudaMalloc");
    check(cudaMalloc((void**)&d_dst, n * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(d_src, host_src, src_bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    const int64_t groups = n / 32;
    const int threads = 256;
    const unsigned grid = (unsigned)((groups + threads - 1) / threads);
    switch (type) {
        case GGMLType::Q4_0: k_q4_0<<<grid, threads>>>((const block_q4_0*)d_src, d_dst, groups); break;
        case GGMLType::Q8_0: k_q8_0<<<grid, threads>>>((const block_q8_0*)d_src, d_dst, groups); break;
        case GGMLType::Q4_1: k_q4_1<<<grid, threads>>>((const block_q4_1*)d_src, d_dst, groups); break;
        case GGMLType::Q5_0: k_q5_0<<<grid, threads>>>((const block_q5_0*)d_src, d_dst, groups); break;
        case GGMLType::Q5_1: k_q5_1<<<grid, threads>>>((const block_q5_1*)d_src, d_dst, groups); break;
        case GGMLType::Q4_K: k_q45_K<<<grid, threads>>>((const block_q4_K*)d_src, d_dst, groups); break;
        case GGMLType::Q5_K: k_q45_K<<<grid, threads>>>((const block_q5_K*)d_src, d_dst, groups); break;
        case GGMLType::Q6_K: k_q6_K<<<grid, threads>>>((const block_q6_K*)d_src, d_dst, groups); break;
        case GGMLType::F16: k_f16<<<grid, threads>>>((const fp16_t*)d_src, d_dst, groups); break;
        default: k_bf16<<<grid, threads>>>((const uint16_t*)d_src, d_dst, groups); break;
    }
    check(cudaGetLastError(), "kernel launch");
    check(cudaMemcpy(host_dst, d_dst, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    cudaFree(d_src);
    cudaFree(d_dst);
}

}  // namespace cuda
}  // namespace lll
