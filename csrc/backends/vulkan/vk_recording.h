// vk_recording.h — a submission's commands written down as a tape of words, and the command
// buffers recorded from tapes, kept so that a submission identical to an earlier one (the next
// decode step of the same shape) is resubmitted without recording anything: the Vulkan
// counterpart of replaying a CUDA graph. Everything a step changes (token ids, positions,
// sequence ids, block tables, rope angles, the embedded rows) reaches the kernels through
// buffers the step fills before the submission, never through the commands, so the commands of
// two decode steps of one shape are the same words (docs/vulkan.md, "Recorded once, resubmitted").
#pragma once
#include <stdint.h>

#include <functional>
#include <vector>

#include "backends/vulkan/vk_instance.h"

namespace lll::vk {

struct Pipeline;

// The commands of one submission as words: the pipelines, the buffers each dispatch binds (handle
// and offset), the push constants, the group counts, the copy regions and fills. Two tapes are
// equal exactly when the command buffers recorded from them would be.
class CommandTape {
public:
    void clear() {
        words_.clear();
        dispatches_ = 0;
    }
    void dispatch(const Pipeline& p, const VkDescriptorBufferInfo* buffers, uint32_t n_buffers, const void* push,
                  uint32_t gx, uint32_t gy, uint32_t gz);
    void copy(VkBuffer src, VkBuffer dst, const VkBufferCopy* regions, uint32_t n_regions);
    void fill_zero(VkBuffer dst, uint64_t offset, uint64_t bytes);
    uint32_t dispatches() const { return dispatches_; }
    const std::vector<uint64_t>& words() const { return words_; }

private:
    std::vector<uint64_t> words_;
    uint32_t dispatches_ = 0;
};

// A command buffer recorded from a tape, with the descriptor pool its sets came from.
struct Recording {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    uint32_t pool_sets = 0;
    std::vector<uint64_t> words;   // the tape it was recorded from
    bool reusable = false;         // false once a buffer it may bind is gone (or while recording)
};

// Recordings kept for resubmission, most recently used first (at most `capacity`; 1 and no reuse
// when replay is off: each submission is then recorded afresh, as a one-shot command buffer).
class RecordingCache {
public:
    RecordingCache(const DeviceFns& f, VkDevice device, VkCommandPool cmd_pool, bool replay, size_t capacity);
    ~RecordingCache();
    RecordingCache(const RecordingCache&) = delete;
    RecordingCache& operator=(const RecordingCache&) = delete;

    // The command buffer for this tape: a kept one that holds the same words (*recorded = false),
    // else the tape recorded into the least recently used slot (*recorded = true). A command
    // buffer still queued must be neither resubmitted nor recorded over: before_reuse(cmd) is
    // called first for the one chosen, and waits for it where it is.
    VkCommandBuffer get(const CommandTape& tape, bool* recorded,
                        const std::function<void(VkCommandBuffer)>& before_reuse);
    // No kept recording is reused any more (a buffer one of them binds is being destroyed).
    void forget();
    bool replay() const { return replay_; }

private:
    void record(Recording& r, const CommandTape& tape);
    void bind_descriptor_sets(Recording& r, const CommandTape& tape, std::vector<VkDescriptorSet>* sets);

    const DeviceFns& f_;
    VkDevice device_;
    VkCommandPool cmd_pool_;
    bool replay_;
    size_t capacity_;
    std::vector<Recording> slots_;   // most recently used first
};

// What the command buffers of this process did (every context together): the tests' evidence
// that steps were replayed, and the benchmark's host cost of recording.
struct CommandStats {
    uint64_t submits = 0;         // vkQueueSubmit calls
    uint64_t recordings = 0;      // command buffers recorded from a tape
    uint64_t replays = 0;         // submissions of a kept recording, nothing recorded
    uint64_t dispatches = 0;      // dispatches submitted (recorded or replayed)
    uint64_t largest_submit = 0;  // the most dispatches one submission held
    uint64_t waits = 0;           // times the host waited for queued submissions to finish
    uint64_t queued_behind = 0;   // submissions queued while an earlier one was still running
    double work_s = 0.0;          // estimated work submitted (slow_gpu_seconds)
    double largest_submit_s = 0.0;   // the most estimated work one submission held
    double largest_op_s = 0.0;       // the most estimated work one op held (a submission holds at
                                     // least one op, whatever the bound)
    double record_cpu_s = 0.0;    // CPU time of the recording thread spent recording command buffers
};
CommandStats& command_stats();

// CPU time of the calling thread, in seconds.
double thread_cpu_seconds();

}  // namespace lll::vk
