// vk_context.h — one Vulkan device ready for compute: a queue, buffers, the embedded pipelines,
// and submissions queued back to back, waited for with a timeout.
#pragma once
#include "backends/vulkan/vk_instance.h"
#include "backends/vulkan/vk_recording.h"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lll::vk {

class Context;

// Largest single allocation localllm makes (a tensor larger than this is an error for now:
// splitting one tensor over several windows is not done yet).
constexpr uint64_t kMaxAllocationBytes = 1ull << 30;
// Every buffer is allocated this much longer than asked: the shaders read quantized blocks as
// 32-bit words at unaligned byte offsets, which may touch the word after a tensor's last byte.
constexpr uint64_t kBufferPadBytes = 16;

enum class MemoryKind { DeviceLocal, Staging };

// The most dispatches one submission holds: LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT (default
// 1000, a decode step of the models tested here in one submission), lower where a driver's
// watchdog needs shorter submissions; invalid_argument naming the variable when it is not a
// whole number from 1 to 1000000.
uint32_t max_dispatches_per_submit();

// The time a slow integrated GPU would take for an op: its `flops` at 50 GFLOP/s and its `bytes`
// of memory traffic at 20 GB/s. Submissions are bounded in this estimate rather than measured
// time (nothing is measured before it runs), so any real device, faster than that, runs each one
// well inside a driver's watchdog (Windows' TDR fires at 2 s).
inline double slow_gpu_seconds(double flops, double bytes) { return flops / 50e9 + bytes / 20e9; }

// The most estimated work (slow_gpu_seconds) one submission holds: LOCALLLM_VULKAN_MAX_SUBMIT_MS
// milliseconds (default 200); invalid_argument naming the variable when it is not a number from
// 0.001 to 1000000.
double max_seconds_per_submit();

// A buffer and its memory; freed with the owning context (move-only).
class Buffer {
public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { release(); }
    void release();

    VkBuffer handle() const { return buffer_; }
    uint64_t size() const { return size_; }   // bytes asked for (without the padding)
    void* mapped() const { return mapped_; }  // Staging buffers only
    const std::string& name() const { return name_; }

private:
    friend class Context;
    Context* ctx_ = nullptr;
    VkBuffer buffer_ = VK_NULL_HANDLE;
    VkDeviceMemory memory_ = VK_NULL_HANDLE;
    uint64_t size_ = 0;
    uint64_t device_bytes_ = 0;   // the allocation's size where it is device memory, else 0
    void* mapped_ = nullptr;
    std::string name_;
};

// One compute kernel: an embedded SPIR-V module with its specialization constants
// (constant_id 0 is the workgroup size), a layout of n storage buffers at bindings 0..n-1 and
// push constants.
struct Pipeline {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    uint32_t n_buffers = 0, push_bytes = 0;
};

// A buffer bound from a byte offset to its end.
struct BufferRange {
    const Buffer* buffer;
    uint64_t offset = 0;
};

class Context {
public:
    explicit Context(int device_index);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    const DeviceInfo& info() const { return info_; }
    const DeviceFns& fns() const { return fns_; }
    VkDevice device() const { return device_; }
    // Bytes one buffer may hold here: min(1 GiB, maxStorageBufferRange, maxMemoryAllocationSize),
    // so a whole buffer is always one bindable window.
    uint64_t max_buffer_bytes() const { return max_buffer_bytes_; }
    // Device-memory bytes the driver gave this context's live device buffers (their memory
    // requirements, padding and alignment included; staging buffers not counted).
    uint64_t device_bytes() const { return device_bytes_; }

    // `name` says what the buffer holds, for the error when it cannot be made.
    Buffer create_buffer(const std::string& name, uint64_t bytes, MemoryKind kind);
    // A device buffer of at least `bytes` that the context owns, for results that live from one
    // dispatch to the next (the q8_1 activations of the integer-dot kernels): the same buffer
    // while it is big enough; a larger one replaces it, the old kept until the work recorded on
    // it has finished.
    const Buffer& scratch(uint64_t bytes);
    // Synchronous copies through a staging buffer.
    void upload(Buffer& dst, const void* src, uint64_t bytes);
    void download(const Buffer& src, void* dst, uint64_t bytes);

    // The pipeline of embedded module `kernel` with these specialization constants (cached).
    const Pipeline& pipeline(const std::string& kernel, uint32_t n_buffers, uint32_t push_bytes,
                             const std::vector<uint32_t>& spec = {});

    // Recording: begin(), any number of dispatch() (each followed by a barrier, so a dispatch
    // sees the writes of the ones before it, in this submission or a later one), then submit() or
    // submit_and_wait(). The commands are written down as a tape (vk_recording.h) and recorded
    // into a command buffer at submission, unless a kept command buffer holds the same tape: that
    // one is resubmitted (LOCALLLM_VULKAN_REPLAY=0 records every submission afresh).
    void begin();
    // Adds an op's estimated work (slow_gpu_seconds) to the open recording's.
    void add_work(double seconds);
    double recorded_work() const { return tape_work_; }
    void dispatch(const Pipeline& p, const std::vector<const Buffer*>& buffers, const void* push,
                  uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);
    // The same with each buffer bound from a byte offset (a multiple of the device's
    // min_storage_offset_alignment: bindable_offset).
    void dispatch(const Pipeline& p, const std::vector<BufferRange>& buffers, const void* push,
                  uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);
    bool bindable_offset(uint64_t offset) const { return offset % info_.min_storage_offset_alignment == 0; }
    void copy(const Buffer& src, Buffer& dst, uint64_t bytes) { copy(src, 0, dst, 0, bytes); }
    void copy(const Buffer& src, uint64_t src_offset, Buffer& dst, uint64_t dst_offset, uint64_t bytes);
    // Several (src offset, dst offset, bytes) regions in one command (a strided gather/scatter).
    void copy_regions(const Buffer& src, Buffer& dst, const std::vector<VkBufferCopy>& regions);
    // Zeros `bytes` (a multiple of 4) of dst from byte `offset` (a multiple of 4).
    void fill_zero(Buffer& dst, uint64_t offset, uint64_t bytes);
    // Whether begin() was called and submit_and_wait() not yet.
    bool recording() const { return recording_; }
    // Dispatches in the open recording.
    uint32_t recorded_dispatches() const { return tape_.dispatches(); }
    // Queues the open recording behind the submissions still running and returns: the device
    // goes on while the host records the next part of a step. At most kMaxQueued are queued; the
    // oldest is waited for before one more goes.
    void submit();
    // Waits until every queued submission has finished, at most LOCALLLM_VULKAN_TIMEOUT_S seconds
    // (default 120) each: a timeout or a lost device is an error, and the context refuses further
    // work. Outside a recording it then frees the replaced scratch buffers.
    void wait_idle();
    // wait_idle(), and where that fails (a timeout, a lost device) the queue waited for as long as
    // the driver takes: what a buffer about to be freed needs.
    void wait_idle_or_drain() noexcept;
    void submit_and_wait() {
        submit();
        wait_idle();
    }
    bool busy() const { return !queued_.empty(); }

private:
    friend class Buffer;
    uint32_t find_memory_type(uint32_t type_bits, MemoryKind kind) const;
    void check_usable() const;
    void wait_oldest();

    static constexpr size_t kMaxQueued = 4;
    struct Queued {
        VkFence fence;
        VkCommandBuffer cmd;
    };

    uint64_t device_bytes_ = 0;
    const Instance& instance_;
    DeviceInfo info_;
    DeviceFns fns_;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t queue_family_ = 0;
    VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
    std::deque<Queued> queued_;          // submitted and not yet waited for, oldest first
    std::vector<VkFence> free_fences_;   // unsignaled, for the next submissions
    CommandTape tape_;                             // the open recording's commands
    double tape_work_ = 0.0;                       // its estimated work (slow_gpu_seconds)
    std::unique_ptr<RecordingCache> recordings_;   // command buffers recorded from tapes
    VkPhysicalDeviceMemoryProperties mem_props_{};
    uint64_t max_buffer_bytes_ = 0;
    bool recording_ = false;
    std::string broken_;   // why the context can no longer be used ("" while it can)
    std::map<std::string, Pipeline> pipelines_;
    Buffer scratch_;
    // Replaced scratch buffers that the open recording or a queued submission may still read.
    std::vector<Buffer> retired_;
};

}  // namespace lll::vk
