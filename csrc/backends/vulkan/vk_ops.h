// vk_ops.h — the kernels of vulkan/shaders/, launched on device buffers. Each records its
// dispatch into the context's open command buffer (Context::begin ... submit_and_wait), so a
// caller strings several together in one submission.
#pragma once
#include <optional>
#include "backends/vulkan/footprint_vulkan.h"
#include "backends/vulkan/vk_context.h"

namespace lll::vk {

// out[i] = a[i] + b[i % b_len]
void op_add(Context& c, const Buffer& a, const Buffer& b, Buffer& out, uint32_t n, uint32_t b_len);
// out[i] = a[i] * s
void op_scale(Context& c, const Buffer& a, Buffer& out, uint32_t n, float s);
// out[i] = act(gate[i]) * up[i], act SiLU or GELU (tanh form)
enum class Glu { SiLU, GELU };
void op_glu(Context& c, Glu kind, const Buffer& gate, const Buffer& up, Buffer& out, uint32_t n);
// Each of `rows` rows of n: y = x / sqrt(mean(x^2) + eps) * w (w: n floats, or null).
void op_rms_norm(Context& c, const Buffer& x, const Buffer* w, Buffer& y, uint32_t rows, uint32_t n, float eps);
// In place on x[T, n_heads, head_dim], the first rope_dims of each head, with the (cos, sin)
// table cs[T][rope_dims] (ops.h rope_table); neox: pairs (i, i + rope_dims/2) instead of (2i, 2i+1).
void op_rope(Context& c, Buffer& x, const Buffer& cs, uint32_t T, uint32_t n_heads, uint32_t head_dim,
             uint32_t rope_dims, bool neox);
// out[r, K] = dequantized row r of a [rows, K] tensor of ggml type `type` (raw blocks in w).
void op_dequantize(Context& c, uint32_t type, const Buffer& w, Buffer& out, uint32_t rows, uint32_t K);
// out[t, K] = dequantized row ids[t] of the table (ids: int32, checked by the caller).
void op_embed(Context& c, uint32_t type, const Buffer& table, const Buffer& ids, Buffer& out, uint32_t T, uint32_t K);
// y[T, N] = x[T, K] . W[N, K]^T, W raw blocks of `type` dequantized in the shader. MatVec for up
// to 4 tokens, Tiled for more; their Int8 forms run on x quantized to q8_1, with integer dot
// products (the quantized types, on a device with shaderIntegerDotProduct). Auto:
// linear_kernel_for.
enum class LinearKernel { Auto, MatVec, MatVecInt8, Tiled, TiledInt8 };
// Where y's [T, N] lies: row t at y[t * ldy + col0 ...]; ldy 0 means N (a plain [T, N]). A matrix
// held as row windows writes each window's outputs straight into its columns of the full y.
struct OutColumns {
    uint32_t ldy = 0, col0 = 0;
};
void op_linear(Context& c, uint32_t type, const Buffer& w, const Buffer& x, Buffer& y, uint32_t T, uint32_t N,
               uint32_t K, LinearKernel kernel = LinearKernel::Auto, OutColumns cols = {});
constexpr uint32_t kMatVecMaxTokens = kVulkanMatVecTokens;   // MAX_COLS in linear_matvec*.comp
// x[T, K] quantized to q8_1 (quantize_q8_1.comp) in the context's scratch: T * K / 32 blocks of 8
// packed words, then their (d, s) pairs from word-pair index d_base. Made once for all the matrices
// that read the same x (Q/K/V, gate/up), until the next quantization reuses the scratch.
struct Q8Input {
    const Buffer* q = nullptr;
    uint32_t d_base = 0, T = 0, K = 0;
};
Q8Input op_quantize_q8_1(Context& c, BufferRange x, uint32_t T, uint32_t K);
// The product with linear_kernel_for's kernel on T tokens of x and y bound from byte offsets
// (multiples of the device's alignment: Context::bindable_offset): a batch taken some rows at a
// time. shared_q8: x quantized once for the matrices that read it: an integer-dot kernel reads
// the one held there, or quantizes x and leaves it there for the next; null: quantized for this
// product alone.
void op_linear_rows(Context& c, uint32_t type, const Buffer& w, BufferRange x, BufferRange y, uint32_t T, uint32_t N,
                    uint32_t K, OutColumns cols = {}, std::optional<Q8Input>* shared_q8 = nullptr);
// The kernel Auto picks for T tokens of `type`: MatVec up to 4 tokens, else Tiled; their Int8
// forms where use_int8_dot holds.
LinearKernel linear_kernel_for(const Context& c, uint32_t type, uint32_t T);
// Whether the matrix-vector kernel on `type` uses integer dot products here: the type has the
// kernel, the device the feature, and either the driver says packed int8 dot products are
// accelerated or LOCALLLM_VULKAN_INT8=1 asks for them (CPU implementations, tests);
// LOCALLLM_VULKAN_INT8=0 turns them off.
bool use_int8_dot(const Context& c, uint32_t type);

// One layer's paged cache on the device (model/kv_cache.h, slot-major rows): K from byte 0 of
// `cache`, V from byte v_offset, each side F16, Q8_0 or Q4_0 (ggml type ids); a quantized side is
// stored rotated by its Walsh-Hadamard size (0: not rotated, always so for F16). And the batch's
// addressing, int32 buffers on the device.
struct KVSide {
    uint32_t type, row_bytes, rot;
};
struct KVLayerView {
    Buffer* cache;
    uint64_t v_offset;
    uint32_t kv_width, block_size;
    KVSide k, v;
};
struct BatchView {
    const Buffer *positions, *seq_of_token, *block_tables;
    uint32_t T, max_blocks;
};
// k, v [T, kv_width] (F32) into each token's slot (block_tables[seq][pos / block_size]): an F16
// side rounded, a quantized one rotated and quantized as the CPU's cache stores it. A quantized
// side needs head_dim (of n_head_kv heads) a multiple of 32 and at most 256.
void op_kv_write(Context& c, const KVLayerView& kv, const Buffer& k, const Buffer& v, const BatchView& b,
                 uint32_t n_head_kv);
// out[T, n_head * head_dim] = softmax(scale q.K^T) V per query head over the keys of positions
// [max(0, pos - window + 1), pos] of the token's sequence (window 0: from 0); scores through
// tanh(s / softcap) * softcap when softcap > 0. head_dim even and at most 256. Over a quantized
// K the query is rotated and rounded through q8_0 first (and the dot products are integer ones
// where use_int8_dot(c, K's type) holds); over a quantized V the output is rotated back
// (backends/cpu/attention.cpp does the same).
struct AttentionShape {
    uint32_t n_head, n_head_kv, head_dim, window;
    float scale, softcap;
};
void op_attention(Context& c, const KVLayerView& kv, const Buffer& q, Buffer& out, const BatchView& b,
                  const AttentionShape& s);

// Whether the typed kernels exist for this ggml type id.
bool vulkan_supports_type(uint32_t type);

}  // namespace lll::vk
