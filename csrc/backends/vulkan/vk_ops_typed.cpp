// vk_ops_typed.cpp — launches of the kernels compiled once per weight block type: dequantize,
// embed and linear (see vk_ops.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>

#include "backends/vulkan/vk_ops.h"
#include "common/blocks.h"

namespace lll::vk {

namespace {

constexpr uint32_t kDequantGroup = 64;
constexpr uint32_t kMatVecCols = kMatVecMaxTokens;
constexpr uint32_t kTile = 64;          // BM = BN in linear_tiled.comp

// The kernel-name suffix of a block type ("q4_k"), or nullptr when the shaders lack it.
const char* type_suffix(uint32_t type) {
    switch (static_cast<GGMLType>(type)) {
        case GGMLType::F32: return "f32";
        case GGMLType::F16: return "f16";
        case GGMLType::BF16: return "bf16";
        case GGMLType::Q4_0: return "q4_0";
        case GGMLType::Q4_1: return "q4_1";
        case GGMLType::Q5_0: return "q5_0";
        case GGMLType::Q5_1: return "q5_1";
        case GGMLType::Q8_0: return "q8_0";
        case GGMLType::Q2_K: return "q2_k";
        case GGMLType::Q3_K: return "q3_k";
        case GGMLType::Q4_K: return "q4_k";
        case GGMLType::Q5_K: return "q5_k";
        case GGMLType::Q6_K: return "q6_k";
        case GGMLType::IQ4_NL: return "iq4_nl";
        case GGMLType::IQ4_XS: return "iq4_xs";
        default: return nullptr;
    }
}

// Whether linear_matvec_q8 was compiled for the type (vulkan/CMakeLists.txt's LOCALLLM_VK_INT8_TYPES).
bool int8_kernel_exists(uint32_t type) {
    switch (static_cast<GGMLType>(type)) {
        case GGMLType::Q4_0: case GGMLType::Q4_1: case GGMLType::Q5_0: case GGMLType::Q5_1:
        case GGMLType::Q8_0: case GGMLType::IQ4_NL: case GGMLType::IQ4_XS: case GGMLType::Q2_K:
        case GGMLType::Q3_K: case GGMLType::Q4_K: case GGMLType::Q5_K: case GGMLType::Q6_K: return true;
        default: return false;
    }
}

std::string kernel_name(const char* family, uint32_t type) {
    const char* s = type_suffix(type);
    if (!s) {
        const char* name = ggml_type_name(type);
        throw std::invalid_argument(std::string("Vulkan ") + family + ": no kernel for type " + (name ? name : std::to_string(type)));
    }
    return std::string(family) + "_" + s;
}

// Bytes of one row of K elements; K must be a whole number of blocks.
uint32_t row_bytes(uint32_t type, uint32_t K) {
    const TypeTraits* tt = type_traits(type);
    if (!tt) throw std::invalid_argument("unknown ggml type " + std::to_string(type));
    if (K % (uint32_t)tt->block_elems != 0)
        throw std::invalid_argument(std::string("row of ") + std::to_string(K) + " elements is not a whole number of " +
                                    tt->name + " blocks of " + std::to_string(tt->block_elems));
    return K / tt->block_elems * tt->block_bytes;
}

// The matrix-vector kernel's workgroup: one subgroup (linear_matvec.comp), 8 to 64 invocations.
uint32_t matvec_group(const Context& c) { return std::clamp<uint32_t>(c.info().subgroup_size, 8, 64); }
// Its rows per workgroup (NUM_ROWS): 2 on a GPU, so a small matrix still fills every compute unit;
// 8 on a CPU implementation, whose fixed cost per workgroup (measured on lavapipe: 2 -> 8 rows
// took a 576x576 Q4_1 decode from 6.8 to 3.3 ms of CPU time) more rows spread.
uint32_t matvec_rows(const Context& c) { return c.info().type == "cpu" ? 8 : 2; }

// Blocks of 32 per segment of a row (matvec_sums.glsl): as many as make one segment per invocation
// of the matrix-vector workgroup. The tiled kernels add their blocks in the same segments, so the
// order of every sum, hence every output's bits, is the same through either kernel on this device.
uint32_t seg_blocks(const Context& c, uint32_t K) {
    const uint32_t blocks = (K + 31) / 32, group = matvec_group(c);
    return std::max<uint32_t>(1, (blocks + group - 1) / group);
}

void spread(const Context& c, uint64_t n, uint32_t* gx, uint32_t* gy) {
    const uint64_t max_x = std::min<uint32_t>(c.info().max_workgroup_count[0], 65535);
    *gx = n ? (uint32_t)std::min<uint64_t>(n, max_x) : 0;
    *gy = n ? (uint32_t)((n + max_x - 1) / max_x) : 0;
}

void dequant_rows(Context& c, uint32_t type, const Buffer& w, const Buffer& ids, bool gather, Buffer& out,
                  uint32_t rows, uint32_t K) {
    struct {
        uint32_t rows, K, row_bytes, chunks;
    } push{rows, K, row_bytes(type, K), (K + 15) / 16};
    const Pipeline& p = c.pipeline(kernel_name("dequant", type), 3, sizeof(push), {kDequantGroup, gather ? 1u : 0u});
    uint32_t gx, gy;
    spread(c, ((uint64_t)rows * push.chunks + kDequantGroup - 1) / kDequantGroup, &gx, &gy);
    c.dispatch(p, {&w, &ids, &out}, &push, gx, gy);
}

}  // namespace

Q8Input op_quantize_q8_1(Context& c, BufferRange x, uint32_t T, uint32_t K) {
    const uint64_t blocks = (uint64_t)T * (K / 32);
    const Buffer& q = c.scratch(blocks * 32 + blocks * 8);
    struct {
        uint32_t T, K, d_base;
    } push{T, K, (uint32_t)(blocks * 32 / 8)};
    const Pipeline& p = c.pipeline("quantize_q8_1", 2, sizeof(push), {kDequantGroup});
    uint32_t gx, gy;
    spread(c, (blocks + kDequantGroup - 1) / kDequantGroup, &gx, &gy);
    c.dispatch(p, {x, BufferRange{&q, 0}}, &push, gx, gy);
    return Q8Input{&q, push.d_base, T, K};
}

namespace {

// The integer-dot kernels' input: q8 where the caller quantized x already (checked to be these
// rows), else x quantized here.
Q8Input int8_input(Context& c, uint32_t type, BufferRange x, uint32_t T, uint32_t K, const Q8Input* q8) {
    if (!int8_kernel_exists(type))
        throw std::invalid_argument(std::string("Vulkan linear: no integer-dot kernel for ") + ggml_type_name(type));
    if (!c.info().integer_dot_product)
        throw std::invalid_argument("Vulkan linear: " + c.info().name + " has no shaderIntegerDotProduct");
    if (q8 && (q8->T != T || q8->K != K))
        throw std::logic_error("Vulkan linear: the shared q8_1 input is [" + std::to_string(q8->T) + ", " +
                               std::to_string(q8->K) + "], the product reads [" + std::to_string(T) + ", " +
                               std::to_string(K) + "]");
    return q8 ? *q8 : op_quantize_q8_1(c, x, T, K);
}

void matvec(Context& c, uint32_t type, const Buffer& w, BufferRange x, BufferRange y, uint32_t T, uint32_t N,
            uint32_t K, OutColumns cols, bool int8, const Q8Input* q8) {
    if (T > kMatVecCols)
        throw std::invalid_argument("Vulkan linear: the matrix-vector kernel takes at most " +
                                    std::to_string(kMatVecCols) + " tokens, got " + std::to_string(T));
    struct {
        uint32_t N, K, T, row_bytes, ldy, y0, seg_blocks, d_base;
    } push{N, K, T, row_bytes(type, K), cols.ldy ? cols.ldy : N, cols.col0, seg_blocks(c, K), 0};
    const uint32_t rows_per_group = matvec_rows(c);
    const std::vector<uint32_t> spec{matvec_group(c), rows_per_group};
    uint32_t gx, gy;
    spread(c, (N + rows_per_group - 1) / rows_per_group, &gx, &gy);
    if (!int8) {
        // linear_matvec.comp's push constants are all but d_base.
        const Pipeline& p = c.pipeline(kernel_name("linear_matvec", type), 3, sizeof(push) - 4, spec);
        c.dispatch(p, {BufferRange{&w, 0}, x, y}, &push, gx, gy);
        return;
    }
    const Q8Input in = int8_input(c, type, x, T, K, q8);
    push.d_base = in.d_base;
    const Pipeline& p = c.pipeline(kernel_name("linear_matvec_q8", type), 3, sizeof(push), spec);
    c.dispatch(p, {BufferRange{&w, 0}, BufferRange{in.q, 0}, y}, &push, gx, gy);
}

// linear_tiled.comp, or linear_tiled_q8.comp on x quantized to q8_1 (int8).
void tiled(Context& c, uint32_t type, const Buffer& w, BufferRange x, BufferRange y, uint32_t T, uint32_t N,
           uint32_t K, OutColumns cols, bool int8, const Q8Input* q8) {
    struct {
        uint32_t N, K, T, row_bytes, tiles_n, ldy, y0, seg_blocks, d_base;
    } push{N, K, T, row_bytes(type, K), (N + kTile - 1) / kTile, cols.ldy ? cols.ldy : N, cols.col0, seg_blocks(c, K), 0};
    uint32_t gx, gy;
    spread(c, (uint64_t)push.tiles_n * ((T + kTile - 1) / kTile), &gx, &gy);
    if (!int8) {
        // linear_tiled.comp's push constants are all but d_base.
        const Pipeline& p = c.pipeline(kernel_name("linear_tiled", type), 3, sizeof(push) - 4);
        c.dispatch(p, {BufferRange{&w, 0}, x, y}, &push, gx, gy);
        return;
    }
    const Q8Input in = int8_input(c, type, x, T, K, q8);
    push.d_base = in.d_base;
    const Pipeline& p = c.pipeline(kernel_name("linear_tiled_q8", type), 3, sizeof(push));
    c.dispatch(p, {BufferRange{&w, 0}, BufferRange{in.q, 0}, y}, &push, gx, gy);
}

void run_linear(Context& c, LinearKernel kernel, uint32_t type, const Buffer& w, BufferRange x, BufferRange y,
                uint32_t T, uint32_t N, uint32_t K, OutColumns cols, const Q8Input* q8) {
    const bool int8 = kernel == LinearKernel::MatVecInt8 || kernel == LinearKernel::TiledInt8;
    if (kernel == LinearKernel::MatVec || kernel == LinearKernel::MatVecInt8)
        matvec(c, type, w, x, y, T, N, K, cols, int8, q8);
    else
        tiled(c, type, w, x, y, T, N, K, cols, int8, q8);
}

}  // namespace

bool vulkan_supports_type(uint32_t type) { return type_suffix(type) != nullptr; }

bool use_int8_dot(const Context& c, uint32_t type) {
    static const char* env = getenv("LOCALLLM_VULKAN_INT8");
    if (env && strcmp(env, "0") == 0) return false;
    const bool asked = env && strcmp(env, "1") == 0;
    return int8_kernel_exists(type) && c.info().integer_dot_product && (asked || c.info().integer_dot_accelerated);
}

LinearKernel linear_kernel_for(const Context& c, uint32_t type, uint32_t T) {
    const bool int8 = use_int8_dot(c, type);
    if (T <= kMatVecCols) return int8 ? LinearKernel::MatVecInt8 : LinearKernel::MatVec;
    return int8 ? LinearKernel::TiledInt8 : LinearKernel::Tiled;
}

void op_linear_rows(Context& c, uint32_t type, const Buffer& w, BufferRange x, BufferRange y, uint32_t T, uint32_t N,
                    uint32_t K, OutColumns cols, std::optional<Q8Input>* shared_q8) {
    const LinearKernel kernel = linear_kernel_for(c, type, T);
    const bool int8 = kernel == LinearKernel::MatVecInt8 || kernel == LinearKernel::TiledInt8;
    if (int8 && shared_q8 && !*shared_q8) *shared_q8 = op_quantize_q8_1(c, x, T, K);
    run_linear(c, kernel, type, w, x, y, T, N, K, cols, int8 && shared_q8 ? &**shared_q8 : nullptr);
}

void op_dequantize(Context& c, uint32_t type, const Buffer& w, Buffer& out, uint32_t rows, uint32_t K) {
    dequant_rows(c, type, w, w, false, out, rows, K);
}

void op_embed(Context& c, uint32_t type, const Buffer& table, const Buffer& ids, Buffer& out, uint32_t T, uint32_t K) {
    dequant_rows(c, type, table, ids, true, out, T, K);
}

void op_linear(Context& c, uint32_t type, const Buffer& w, const Buffer& x, Buffer& y, uint32_t T, uint32_t N,
               uint32_t K, LinearKernel kernel, OutColumns cols) {
    if (kernel == LinearKernel::Auto) kernel = linear_kernel_for(c, type, T);
    run_linear(c, kernel, type, w, BufferRange{&x, 0}, BufferRange{&y, 0}, T, N, K, cols, nullptr);
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
