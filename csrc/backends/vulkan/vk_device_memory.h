// vk_device_memory.h — the Vulkan backend's memory behind backend.h's pointers. backend.h passes
// device memory as plain pointers; Vulkan has buffers, not addresses. Each buffer therefore gets
// a range of host address space reserved with no access (so a stray host read faults instead of
// reading something else), and an op finds the buffer and offset of a pointer in that table.
// The same object holds the device's context and its open recording: ops are recorded into one
// command buffer and submitted when the host needs a result (flush, which waits for it), or queued
// without waiting when the recording is full: LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT dispatches
// or LOCALLLM_VULKAN_MAX_SUBMIT_MS of estimated work (slow_gpu_seconds), so that no submission
// runs long enough for a driver's watchdog and the device is not left idle between the parts of
// a long step. Host data travels through staging memory the device keeps: an upload is a
// copy command in the open recording, from the same staging bytes at every decode step, so a
// step's commands are the same and its recording can be resubmitted (vk_recording.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/vulkan/vk_context.h"

namespace lll::vk {

class DeviceMemory {
public:
    explicit DeviceMemory(int device_index);
    Context& ctx() { return ctx_; }

    // The buffer holding `p` and p's byte offset in it; logic_error naming `what` when p is not
    // in a buffer of this device.
    Buffer& find(const void* p, uint64_t* offset, const char* what);
    // The buffer that starts at p (the kernels bind whole buffers).
    Buffer& whole(const void* p, const char* what);

    // Opens a recording for an op of `dispatches` dispatches and `seconds` of estimated work
    // (slow_gpu_seconds) if none is open; queues the open one first when the op would take it
    // past the bounds of one submission (an op alone may exceed them).
    void record(uint32_t dispatches = 1, double seconds = 0.0);
    // Submits the open recording and waits for every queued one.
    void flush();
    // Host bytes into [offset, offset + n) of a buffer: copied to staging memory now (the host
    // source may change or go at once) and onto the device by a command of the open recording,
    // so later commands see them and earlier ones do not.
    void upload(Buffer& dst, uint64_t offset, const void* src, uint64_t n);
    // Bytes [offset, offset + n) of a buffer to the host once every recorded command has run
    // (submits the open recording).
    void download(const Buffer& src, uint64_t offset, void* dst, uint64_t n);

private:
    friend class DeviceBuffer;
    // n bytes of staging memory for the open recording (nullptr when n is over one chunk's
    // size: the caller copies through a staging buffer of its own); *buf and *off say where.
    uint8_t* stage(uint64_t n, Buffer** buf, uint64_t* off);
    Context ctx_;
    std::map<uintptr_t, Buffer*> buffers_;   // by the start of each buffer's address range
    uint32_t max_dispatches_;
    double max_seconds_;
    // Staging chunks, kept for the device's life so a step's copies name the same bytes every
    // time; filled from the first after each flush (they are free once the work reading them has
    // finished).
    std::vector<Buffer> staging_;
    size_t stage_chunk_ = 0;
    uint64_t stage_used_ = 0;
};

// A zero-filled device buffer behind a reserved host address range (backend.h's Buffer).
class DeviceBuffer : public lll::Buffer {
public:
    DeviceBuffer(std::shared_ptr<DeviceMemory> mem, size_t bytes, const std::string& what);
    ~DeviceBuffer() override;

private:
    std::shared_ptr<DeviceMemory> mem_;   // outlives every buffer: the context frees them
    vk::Buffer buffer_;
    size_t reserved_ = 0;
};

}  // namespace lll::vk
