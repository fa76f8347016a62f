// vk_recording.cpp — tapes, and command buffers recorded from them (see vk_recording.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_recording.h"

#include <string.h>
#include <time.h>

#include <algorithm>

#include "backends/vulkan/vk_context.h"

namespace lll::vk {

namespace {

enum Op : uint64_t { kDispatch = 1, kCopy = 2, kFill = 3 };

template <typename H>
uint64_t handle_word(H h) {
    uint64_t w = 0;
    memcpy(&w, &h, sizeof h);
    return w;
}

template <typename H>
H word_handle(uint64_t w) {
    H h;
    memcpy(&h, &w, sizeof h);
    return h;
}

// Every command waits for the writes of the ones before it; the host may read what the
// submission wrote once its fence has signalled (downloads through staging memory).
void full_barrier(const DeviceFns& f, VkCommandBuffer cmd) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
    const VkPipelineStageFlags src = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    f.vkCmdPipelineBarrier(cmd, src, src | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

// A dispatch's words: kDispatch, pipeline, n_buffers, push words, gx, gy, gz, then (handle,
// offset) per buffer, then the push constants.
struct DispatchView {
    const Pipeline* pipeline;
    uint32_t n_buffers, push_words, g[3];
    const uint64_t* buffers;
    const uint64_t* push;
};
constexpr size_t kDispatchHead = 7;

DispatchView read_dispatch(const uint64_t* w) {
    DispatchView d;
    d.pipeline = reinterpret_cast<const Pipeline*>(w[1]);
    d.n_buffers = (uint32_t)w[2], d.push_words = (uint32_t)w[3];
    d.g[0] = (uint32_t)w[4], d.g[1] = (uint32_t)w[5], d.g[2] = (uint32_t)w[6];
    d.buffers = w + kDispatchHead;
    d.push = d.buffers + 2 * d.n_buffers;
    return d;
}

// The number of words of the command at w.
size_t command_words(const uint64_t* w) {
    switch (w[0]) {
        case kDispatch: return kDispatchHead + 2 * w[2] + w[3];
        case kCopy: return 4 + 3 * w[3];
        default: return 4;   // kFill
    }
}

}  // namespace

CommandStats& command_stats() {
    static CommandStats s;
    return s;
}

double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void CommandTape::dispatch(const Pipeline& p, const VkDescriptorBufferInfo* buffers, uint32_t n_buffers,
                           const void* push, uint32_t gx, uint32_t gy, uint32_t gz) {
    const uint32_t push_words = (p.push_bytes + 7) / 8;
    const uint64_t head[kDispatchHead] = {kDispatch, reinterpret_cast<uint64_t>(&p), n_buffers, push_words, gx, gy, gz};
    words_.insert(words_.end(), head, head + kDispatchHead);
    for (uint32_t i = 0; i < n_buffers; ++i) {
        words_.push_back(handle_word(buffers[i].buffer));
        words_.push_back(buffers[i].offset);
    }
    const size_t at = words_.size();
    words_.resize(at + push_words, 0);
    if (p.push_bytes) memcpy(words_.data() + at, push, p.push_bytes);
    ++dispatches_;
}

void CommandTape::copy(VkBuffer src, VkBuffer dst, const VkBufferCopy* regions, uint32_t n_regions) {
    const uint64_t head[4] = {kCopy, handle_word(src), handle_word(dst), n_regions};
    words_.insert(words_.end(), head, head + 4);
    for (uint32_t i = 0; i < n_regions; ++i) {
        words_.push_back(regions[i].srcOffset);
        words_.push_back(regions[i].dstOffset);
        words_.push_back(regions[i].size);
    }
}

void CommandTape::fill_zero(VkBuffer dst, uint64_t offset, uint64_t bytes) {
    const uint64_t w[4] = {kFill, handle_word(dst), offset, bytes};
    words_.insert(words_.end(), w, w + 4);
}

RecordingCache::RecordingCache(const DeviceFns& f, VkDevice device, VkCommandPool cmd_pool, bool replay,
                               size_t capacity)
    : f_(f), device_(device), cmd_pool_(cmd_pool), replay_(replay), capacity_(replay ? std::max<size_t>(capacity, 1) : 1) {}

RecordingCache::~RecordingCache() {
    // The command buffers go with their pool (the context destroys it after this).
    for (Recording& r : slots_)
        if (r.pool) f_.vkDestroyDescriptorPool(device_, r.pool, nullptr);
}

void RecordingCache::forget() {
    for (Recording& r : slots_) r.reusable = false;
}

VkCommandBuffer RecordingCache::get(const CommandTape& tape, bool* recorded,
                                    const std::function<void(VkCommandBuffer)>& before_reuse) {
    if (replay_) {
        for (size_t i = 0; i < slots_.size(); ++i) {
            if (!slots_[i].reusable || slots_[i].words != tape.words()) continue;
            std::rotate(slots_.begin(), slots_.begin() + (ptrdiff_t)i, slots_.begin() + (ptrdiff_t)i + 1);
            before_reuse(slots_.front().cmd);
            *recorded = false;
            return slots_.front().cmd;
        }
    }
    if (slots_.size() < capacity_) {
        Recording r;
        VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = cmd_pool_;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        check(f_.vkAllocateCommandBuffers(device_, &ai, &r.cmd), "vkAllocateCommandBuffers");
        slots_.push_back(std::move(r));
    }
    std::rotate(slots_.begin(), slots_.end() - 1, slots_.end());   // the least recently used, to the front
    Recording& r = slots_.front();
    before_reuse(r.cmd);
    r.reusable = false;   // should recording fail half-way, nothing matches it
    const double t0 = thread_cpu_seconds();
    record(r, tape);
    command_stats().record_cpu_s += thread_cpu_seconds() - t0;
    if (replay_) r.words = tape.words(), r.reusable = true;
    *recorded = true;
    return r.cmd;
}

// One descriptor set per dispatch from the recording's own pool (grown when too small), all
// allocated and written in one call each.
void RecordingCache::bind_descriptor_sets(Recording& r, const CommandTape& tape, std::vector<VkDescriptorSet>* sets) {
    const uint32_t n = tape.dispatches();
    sets->clear();
    if (!n) return;   // copies and fills only: no sets (the pool, if any, is reset when next used)
    if (r.pool && r.pool_sets < n) {
        f_.vkDestroyDescriptorPool(device_, r.pool, nullptr);
        r.pool = VK_NULL_HANDLE;
    }
    if (!r.pool) {
        const uint32_t want = std::max<uint32_t>(n, 64);
        VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, want * 8};
        VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
        dpi.maxSets = want;
        dpi.poolSizeCount = 1;
        dpi.pPoolSizes = &ps;
        check(f_.vkCreateDescriptorPool(device_, &dpi, nullptr, &r.pool), "vkCreateDescriptorPool");
        r.pool_sets = want;
    } else {
        check(f_.vkResetDescriptorPool(device_, r.pool, 0), "vkResetDescriptorPool");
    }
    sets->assign(n, VK_NULL_HANDLE);
    std::vector<VkDescriptorSetLayout> layouts;
    std::vector<VkDescriptorBufferInfo> infos;
    layouts.reserve(n);
    const std::vector<uint64_t>& w = tape.words();
    for (size_t i = 0; i < w.size(); i += command_words(&w[i])) {
        if (w[i] != kDispatch) continue;
        const DispatchView d = read_dispatch(&w[i]);
        layouts.push_back(d.pipeline->set_layout);
        for (uint32_t b = 0; b < d.n_buffers; ++b)
            infos.push_back({word_handle<VkBuffer>(d.buffers[2 * b]), d.buffers[2 * b + 1], VK_WHOLE_SIZE});
    }
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = r.pool;
    ai.descriptorSetCount = n;
    ai.pSetLayouts = layouts.data();
    check(f_.vkAllocateDescriptorSets(device_, &ai, sets->data()), "vkAllocateDescriptorSets");
    std::vector<VkWriteDescriptorSet> writes;
    writes.reserve(infos.size());
    size_t info = 0, set = 0;
    for (size_t i = 0; i < w.size(); i += command_words(&w[i])) {
        if (w[i] != kDispatch) continue;
        const DispatchView d = read_dispatch(&w[i]);
        for (uint32_t b = 0; b < d.n_buffers; ++b) {
            VkWriteDescriptorSet wr{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
            wr.dstSet = (*sets)[set];
            wr.dstBinding = b;
            wr.descriptorCount = 1;
            wr.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            wr.pBufferInfo = &infos[info++];
            writes.push_back(wr);
        }
        ++set;
    }
    f_.vkUpdateDescriptorSets(device_, (uint32_t)writes.size(), writes.data(), 0, nullptr);
}

void RecordingCache::record(Recording& r, const CommandTape& tape) {
    std::vector<VkDescriptorSet> sets;
    bind_descriptor_sets(r, tape, &sets);
    check(f_.vkResetCommandBuffer(r.cmd, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = replay_ ? 0 : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(f_.vkBeginCommandBuffer(r.cmd, &bi), "vkBeginCommandBuffer");
    const std::vector<uint64_t>& w = tape.words();
    const Pipeline* bound = nullptr;
    size_t set = 0;
    for (size_t i = 0; i < w.size(); i += command_words(&w[i])) {
        if (w[i] == kDispatch) {
            const DispatchView d = read_dispatch(&w[i]);
            if (d.pipeline != bound) f_.vkCmdBindPipeline(r.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline->pipeline);
            bound = d.pipeline;
            f_.vkCmdBindDescriptorSets(r.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline->layout, 0, 1, &sets[set++], 0,
                                       nullptr);
            if (d.pipeline->push_bytes)
                f_.vkCmdPushConstants(r.cmd, d.pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, d.pipeline->push_bytes,
                                      d.push);
            f_.vkCmdDispatch(r.cmd, d.g[0], d.g[1], d.g[2]);
        } else if (w[i] == kCopy) {
            std::vector<VkBufferCopy> regions(w[i + 3]);
            for (size_t k = 0; k < regions.size(); ++k) regions[k] = {w[i + 4 + 3 * k], w[i + 5 + 3 * k], w[i + 6 + 3 * k]};
            if (!regions.empty())
                f_.vkCmdCopyBuffer(r.cmd, word_handle<VkBuffer>(w[i + 1]), word_handle<VkBuffer>(w[i + 2]),
                                   (uint32_t)regions.size(), regions.data());
        } else {
            if (w[i + 3]) f_.vkCmdFillBuffer(r.cmd, word_handle<VkBuffer>(w[i + 1]), w[i + 2], w[i + 3], 0u);
        }
        full_barrier(f_, r.cmd);
    }
    check(f_.vkEndCommandBuffer(r.cmd), "vkEndCommandBuffer");
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
