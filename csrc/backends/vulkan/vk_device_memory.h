// vk_device_memory.h — the Vulkan backend's memory behind backend.h's pointers. backend.h passes
// device memory as plain pointers; Vulkan has buffers, not addresses. Each buffer therefore gets
// a range of host address space reserved with no access (so a stray host read faults instead of
// reading something else), and an op finds the buffer and offset of a pointer in that table.
// The same object holds the device's context and its open recording: ops are recorded into one
// command buffer and submitted when the host needs a result (flush).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <map>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/vulkan/vk_context.h"

namespace lll::vk {

class DeviceMemory {
public:
    explicit DeviceMemory(int device_index) : ctx_(device_index) {}
    Context& ctx() { return ctx_; }

    // The buffer holding `p` and p's byte offset in it; logic_error naming `what` when p is not
    // in a buffer of this device.
    Buffer& find(const void* p, uint64_t* offset, const char* what);
    // The buffer that starts at p (the kernels bind whole buffers).
    Buffer& whole(const void* p, const char* what);

    // Opens a recording if none is open; counts `dispatches` against the descriptor pool and
    // submits first when they would not fit.
    void record(uint32_t dispatches = 1);
    // Submits the open recording and waits for it.
    void flush();
    // Synchronous copies between host memory and bytes [offset, offset + n) of a buffer.
    void upload(Buffer& dst, uint64_t offset, const void* src, uint64_t n);
    void download(const Buffer& src, uint64_t offset, void* dst, uint64_t n);

private:
    friend class DeviceBuffer;
    Context ctx_;
    std::map<uintptr_t, Buffer*> buffers_;   // by the start of each buffer's address range
    uint32_t recorded_ = 0;                  // dispatches in the open recording
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
