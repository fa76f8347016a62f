// ops.cu — the row and element-wise operations of the forward pass (RMSNorm, RoPE, SwiGLU,
// GEGLU, residual and bias adds, scaling), in the conventions of csrc/backends/cpu/ops.cpp.
#include <math.h>
#include "common.cuh"
#include "common/fp16.h"
#include "common/rope.h"

namespace lll {
namespace cuda {

constexpr int kNormThreads = 256;

// One block per row: y = x * (1 / sqrt(mean(x^2) + eps)) * w.
__global__ void __launch_bounds__(kNormThreads)
k_rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    __shared__ float partial[kNormThreads / 32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads) sum += xr[i] * xr[i];
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < kNormThreads / 32; ++i) total += partial[i];
    const float scale = 1.0f / sqrtf(total / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads) yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
}

// One thread per token: its row of (cos, sin) by csrc/common/rope.h, as csrc/backends/cpu/ops.cpp's rope_table.
__global__ void k_rope_table(const int32_t* positions, int64_t T, int rope_dims, float theta_scale, RopeScaling sc,
                             float corr_low, float corr_high, const float* freq_factors, float* cs) {
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float corr[2] = {corr_low, corr_high};
    rope_table_row((float)positions[t], rope_dims, theta_scale, sc, corr, freq_factors, cs + t * rope_dims);
}

// One thread per rotated pair of one (token, head).
__global__ void k_rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const float* cs_all, int neox) {
    const int half = rope_dims / 2;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= T * n_heads * half) return;
    const int pair = (int)(i % half);
    const int64_t th = i / half;                       // token * n_heads + head
    const int64_t t = th / n_heads;
    float* v = x + th * head_dim;
    const float c = cs_all[t * rope_dims + 2 * pair], s = cs_all[t * rope_dims + 2 * pair + 1];
    const int a = neox ? pair : 2 * pair;              // normal: (v[2i], v[2i+1]); NeoX: (v[i], v[i+half])
    const int b = neox ? pair + half : 2 * pair + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = fmaf(x0, c, -(x1 * s));
    v[b] = fmaf(x0, s, x1 * c);
}

__global__ void k_swiglu(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}

// GELU through F16 as ggml's table does: the gate rounded to F16, GELU (tanh form) in f32, the
// result rounded to F16; the same clamps at +-10 as csrc/backends/cpu/ops.cpp.
__global__ void k_geglu(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    if (g <= -10.0f) {
        out[i] = 0.0f;
    } else if (g >= 10.0f) {
        out[i] = g * up[i];
    } else {
        const float x = fp16_to_f32(f32_to_fp16(g));
        const float gelu = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
        out[i] = fp16_to_f32(f32_to_fp16(gelu)) * up[i];
    }
}

__global__ void k_add(float* y, const float* x, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void k_add_bias_rows(float* rows, const float* bias, int64_t total, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < total) rows[i] += bias[i % n];
}

__global__ void k_scale(float* y, float scale, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] *= scale;
}

}  // namespace cuda
}  // namespace lll

using namespace lll::cuda;

extern "C" {

llc_status llc_rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps, llc_stream s) {
    LLC_REQUIRE(rows >= 0 && rows <= 0x7fffffff && n > 0, "rms_norm: bad shape");
    if (rows == 0) return LLC_OK;
    k_rms_norm<<<(unsigned)rows, kNormThreads, 0, s>>>(x, w, y, n, eps);
    return launched("rms_norm");
}

llc_status llc_rope_table(const int32_t* positions, int64_t T, int rope_dims, float base,
                          const llc_rope_scaling* scaling, float* cs, llc_stream s) {
    LLC_REQUIRE(T >= 0 && rope_dims > 0 && rope_dims % 2 == 0, "rope_table: rope_dims must be positive and even");
    if (T == 0) return LLC_OK;
    lll::RopeScaling sc;
    const float* factors = nullptr;
    if (scaling) {
        sc.freq_scale = scaling->freq_scale, sc.ext_factor = scaling->ext_factor, sc.attn_factor = scaling->attn_factor;
        sc.n_ctx_orig = scaling->n_ctx_orig, sc.beta_fast = scaling->beta_fast, sc.beta_slow = scaling->beta_slow;
        factors = scaling->freq_factors;
    }
    float corr[2] = {0.0f, 0.0f};
    if (sc.ext_factor != 0.0f) lll::rope_yarn_corr_dims(rope_dims, base, sc, corr);
    k_rope_table<<<blocks_for(T, 128), 128, 0, s>>>(positions, T, rope_dims, powf(base, -2.0f / (float)rope_dims), sc,
                                                    corr[0], corr[1], factors, cs);
    return launched("rope_table");
}

llc_status llc_rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const float* cs, int style,
                    llc_stream s) {
    LLC_REQUIRE(style == 0 || style == 1, "rope: style must be 0 (normal) or 1 (NeoX)");
    LLC_REQUIRE(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim && n_heads > 0 && T >= 0,
                "rope: rope_dims must be even and within head_dim");
    const int64_t pairs = T * n_heads * (rope_dims / 2);
    if (pairs == 0) return LLC_OK;
    k_rope<<<blocks_for(pairs, 256), 256, 0, s>>>(x, T, n_heads, head_dim, rope_dims, cs, style);
    return launched("rope");
}

llc_status llc_swiglu(const float* gate, const float* up, float* out, int64_t n, llc_stream s) {
    if (n <= 0) return LLC_OK;
    k_swiglu<<<blocks_for(n, 256), 256, 0, s>>>(gate, up, out, n);
    return launched("swiglu");
}

llc_status llc_geglu(const float* gate, const float* up, float* out, int64_t n, llc_stream s) {
    if (n <= 0) return LLC_OK;
    k_geglu<<<blocks_for(n, 256), 256, 0, s>>>(gate, up, out, n);
    return launched("geglu");
}

llc_status llc_add(float* y, const float* x, int64_t n, llc_stream s) {
    if (n <= 0) return LLC_OK;
    k_add<<<blocks_for(n, 256), 256, 0, s>>>(y, x, n);
    return launched("add");
}

llc_status llc_add_bias_rows(float* rows, const float* bias, int64_t n_rows, int64_t n, llc_stream s) {
    LLC_REQUIRE(n_rows >= 0 && n > 0, "add_bias_rows: bad shape");
    if (n_rows == 0) return LLC_OK;
    k_add_bias_rows<<<blocks_for(n_rows * n, 256), 256, 0, s>>>(rows, bias, n_rows * n, n);
    return launched("add_bias_rows");
}

llc_status llc_scale(float* y, float scale, int64_t n, llc_stream s) {
    if (n <= 0) return LLC_OK;
    k_scale<<<blocks_for(n, 256), 256, 0, s>>>(y, scale, n);
    return launched("scale");
}

}  // extern "C"
