// vk_ops_attention.cpp — launches of the paged KV kernels: kv_write and attention (see vk_ops.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include <algorithm>
#include <stdexcept>
#include <string>

#include "backends/vulkan/vk_ops.h"
#include "model/kv_cache.h"

namespace lll::vk {

namespace {

constexpr uint32_t kKVWriteGroup = 256;
constexpr uint32_t kAttentionChunk = 64;      // CHUNK in attention.comp: keys per step, one per invocation
constexpr uint32_t kMaxHeadDim = 256;         // MAX_HEAD_DIM in attention.comp

void spread(const Context& c, uint64_t n, uint32_t* gx, uint32_t* gy) {
    const uint64_t max_x = std::min<uint32_t>(c.info().max_workgroup_count[0], 65535);
    *gx = n ? (uint32_t)std::min<uint64_t>(n, max_x) : 0;
    *gy = n ? (uint32_t)((n + max_x - 1) / max_x) : 0;
}

// The ggml type ids of the cache's sides.
constexpr uint32_t kF16 = (uint32_t)GGMLType::F16, kQ4_0 = (uint32_t)GGMLType::Q4_0, kQ8_0 = (uint32_t)GGMLType::Q8_0;
constexpr uint32_t kKVWriteQuantGroup = 64;   // kv_write_quant.comp: one workgroup per (token, head)

const char* cache_type_name(uint32_t type) { return lll::cache_type_name(static_cast<GGMLType>(type)); }

float rot_scale(uint32_t rot) { return rot ? hadamard_scale((int)rot) : 0.0f; }   // the CPU's

// The cache's sides as the kernels can read them: an F16 side as F16 pairs in 32-bit words, V's
// at a word boundary; a quantized side's heads in whole blocks of 32 that fit the shared head.
void check_sides(const KVLayerView& kv, uint32_t head_dim) {
    for (const KVSide* side : {&kv.k, &kv.v}) {
        if (side->type != kF16 && side->type != kQ8_0 && side->type != kQ4_0)
            throw std::invalid_argument("Vulkan KV cache: type " + std::to_string(side->type) + " is not f16, q8_0 or q4_0");
        if (side->type != kF16 && (head_dim % 32 || head_dim > kMaxHeadDim))
            throw std::invalid_argument(std::string("Vulkan KV cache: a ") + cache_type_name(side->type) +
                                        " side needs head_dim a multiple of 32 and at most " +
                                        std::to_string(kMaxHeadDim) + " (got " + std::to_string(head_dim) + ")");
    }
    if (kv.kv_width % 2 || (kv.v.type == kF16 && kv.v_offset % 4))
        throw std::invalid_argument("Vulkan KV cache: V offset " + std::to_string(kv.v_offset) + " and kv_width " +
                                    std::to_string(kv.kv_width) + " must allow 32-bit words of F16 pairs");
}

// One quantized side (keys: values false) of the batch into its slots.
void kv_write_quantized(Context& c, const KVLayerView& kv, bool values, const Buffer& x, const BatchView& b,
                        uint32_t n_head_kv) {
    const KVSide& side = values ? kv.v : kv.k;
    struct {
        uint32_t T, n_head_kv, head_dim, block_size, max_blocks, side_offset, row_bytes, rot;
        float rot_scale;
    } push{b.T, n_head_kv, kv.kv_width / n_head_kv, kv.block_size, b.max_blocks,
           values ? (uint32_t)kv.v_offset : 0u, side.row_bytes, side.rot, rot_scale(side.rot)};
    const Pipeline& p = c.pipeline(std::string("kv_write_quant_") + cache_type_name(side.type), 5, sizeof(push),
                                   {kKVWriteQuantGroup});
    uint32_t gx, gy;
    spread(c, (uint64_t)b.T * n_head_kv, &gx, &gy);
    c.dispatch(p, {kv.cache, &x, b.positions, b.seq_of_token, b.block_tables}, &push, gx, gy);
}

}  // namespace

void op_kv_write(Context& c, const KVLayerView& kv, const Buffer& k, const Buffer& v, const BatchView& b,
                 uint32_t n_head_kv) {
    if (n_head_kv == 0 || kv.kv_width % n_head_kv)
        throw std::invalid_argument("Vulkan KV cache: kv_width " + std::to_string(kv.kv_width) + " is not " +
                                    std::to_string(n_head_kv) + " heads");
    check_sides(kv, kv.kv_width / n_head_kv);
    if (kv.k.type != kF16) kv_write_quantized(c, kv, false, k, b, n_head_kv);
    if (kv.v.type != kF16) kv_write_quantized(c, kv, true, v, b, n_head_kv);
    const uint32_t f16_sides = (kv.k.type == kF16 ? 1u : 0u) | (kv.v.type == kF16 ? 2u : 0u);
    if (!f16_sides) return;
    struct {
        uint32_t T, kv_width, block_size, max_blocks, v_word_offset, sides;
    } push{b.T, kv.kv_width, kv.block_size, b.max_blocks, (uint32_t)(kv.v_offset / 4), f16_sides};
    const Pipeline& p = c.pipeline("kv_write", 6, sizeof(push), {kKVWriteGroup});
    uint32_t gx, gy;
    spread(c, ((uint64_t)b.T * (kv.kv_width / 2) + kKVWriteGroup - 1) / kKVWriteGroup, &gx, &gy);
    c.dispatch(p, {kv.cache, &k, &v, b.positions, b.seq_of_token, b.block_tables}, &push, gx, gy);
}

void op_attention(Context& c, const KVLayerView& kv, const Buffer& q, Buffer& out, const BatchView& b,
                  const AttentionShape& s) {
    if (s.head_dim % 2 || s.head_dim > kMaxHeadDim)
        throw std::invalid_argument("Vulkan attention: head_dim " + std::to_string(s.head_dim) +
                                    " must be even and at most " + std::to_string(kMaxHeadDim));
    if (s.n_head_kv == 0 || s.n_head % s.n_head_kv || s.n_head_kv * s.head_dim != kv.kv_width)
        throw std::invalid_argument("Vulkan attention: " + std::to_string(s.n_head) + " query heads over " +
                                    std::to_string(s.n_head_kv) + " kv heads of " + std::to_string(s.head_dim) +
                                    " do not match the cache's width " + std::to_string(kv.kv_width));
    check_sides(kv, s.head_dim);
    struct {
        uint32_t T, n_head, n_head_kv, head_dim, kv_width, block_size, max_blocks, v_offset, window;
        float scale, softcap;
        uint32_t k_row_bytes, v_row_bytes, rot_k, rot_v;
        float rot_k_scale, rot_v_scale;
    } push{b.T, s.n_head, s.n_head_kv, s.head_dim, kv.kv_width, kv.block_size, b.max_blocks, (uint32_t)kv.v_offset,
           s.window, s.scale, s.softcap, kv.k.row_bytes, kv.v.row_bytes, kv.k.rot, kv.v.rot, rot_scale(kv.k.rot),
           rot_scale(kv.v.rot)};
    // A quantized K meets the q8_0 query in integer dot products where linear's would run.
    const bool int8 = kv.k.type != kF16 && use_int8_dot(c, kv.k.type);
    const std::string name = std::string("attention_") + cache_type_name(kv.k.type) + "_" +
                             cache_type_name(kv.v.type) + (int8 ? "_int8" : "");
    const Pipeline& p = c.pipeline(name, 6, sizeof(push), {kAttentionChunk});
    uint32_t gx, gy;
    spread(c, (uint64_t)b.T * s.n_head, &gx, &gy);
    c.dispatch(p, {kv.cache, &q, &out, b.positions, b.seq_of_token, b.block_tables}, &push, gx, gy);
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
