// vk_ops_attention.cpp — launches of the paged KV kernels: kv_write and attention (see vk_ops.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include <algorithm>
#include <stdexcept>
#include <string>

#include "backends/vulkan/vk_ops.h"

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

// The word offset of V in the cache; the kernels read the cache as 32-bit words.
uint32_t v_words(const KVLayerView& kv) {
    if (kv.v_offset % 4 || kv.kv_width % 2)
        throw std::invalid_argument("Vulkan KV cache: V offset " + std::to_string(kv.v_offset) + " and kv_width " +
                                    std::to_string(kv.kv_width) + " must allow 32-bit words of F16 pairs");
    return (uint32_t)(kv.v_offset / 4);
}

}  // namespace

void op_kv_write(Context& c, const KVLayerView& kv, const Buffer& k, const Buffer& v, const BatchView& b) {
    struct {
        uint32_t T, kv_width, block_size, max_blocks, v_word_offset;
    } push{b.T, kv.kv_width, kv.block_size, b.max_blocks, v_words(kv)};
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
    struct {
        uint32_t T, n_head, n_head_kv, head_dim, kv_width, block_size, max_blocks, v_word_offset, window;
        float scale, softcap;
    } push{b.T, s.n_head, s.n_head_kv, s.head_dim, kv.kv_width, kv.block_size, b.max_blocks, v_words(kv), s.window,
           s.scale, s.softcap};
    const Pipeline& p = c.pipeline("attention", 6, sizeof(push), {kAttentionChunk});
    uint32_t gx, gy;
    spread(c, (uint64_t)b.T * s.n_head, &gx, &gy);
    c.dispatch(p, {kv.cache, &q, &out, b.positions, b.seq_of_token, b.block_tables}, &push, gx, gy);
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
