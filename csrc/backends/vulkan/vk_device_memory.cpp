// vk_device_memory.cpp — see vk_device_memory.h.
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_device_memory.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace lll::vk {

namespace {

// Staging memory comes in chunks of this many bytes (an upload or download over it takes a
// staging buffer of its own, outside the recording); a recording that would need more than
// kStageChunks of them is submitted first.
constexpr uint64_t kStageChunkBytes = 4ull << 20;
constexpr size_t kStageChunks = 4;

std::string hex(const void* p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

}  // namespace

DeviceMemory::DeviceMemory(int device_index)
    : ctx_(device_index), max_dispatches_(vk::max_dispatches_per_submit()), max_seconds_(vk::max_seconds_per_submit()) {}

Buffer& DeviceMemory::find(const void* p, uint64_t* offset, const char* what) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = buffers_.upper_bound(a);
    if (p && it != buffers_.begin()) {
        --it;
        Buffer* b = it->second;
        if (a - it->first <= b->size()) {
            *offset = a - it->first;
            return *b;
        }
    }
    throw std::logic_error(std::string("Vulkan backend: ") + what + " (" + hex(p) + ") is not in its device memory");
}

Buffer& DeviceMemory::whole(const void* p, const char* what) {
    uint64_t offset = 0;
    Buffer& b = find(p, &offset, what);
    if (offset != 0)
        throw std::logic_error(std::string("Vulkan backend: ") + what + " starts " + std::to_string(offset) +
                               " bytes into buffer '" + b.name() + "'; its kernels take whole buffers");
    return b;
}

void DeviceMemory::record(uint32_t dispatches, double seconds) {
    // A full recording is queued, not waited for: the device runs it while the next is recorded.
    // Its staging bytes stay reserved until a flush has waited for it.
    if (ctx_.recording() && ctx_.recorded_dispatches() > 0 &&
        (ctx_.recorded_dispatches() + dispatches > max_dispatches_ || ctx_.recorded_work() + seconds > max_seconds_))
        ctx_.submit();
    if (!ctx_.recording()) ctx_.begin();
    ctx_.add_work(seconds);
}

void DeviceMemory::flush() {
    if (ctx_.recording()) ctx_.submit();
    ctx_.wait_idle();
    stage_chunk_ = 0, stage_used_ = 0;
}

uint8_t* DeviceMemory::stage(uint64_t n, Buffer** buf, uint64_t* off) {
    if (n > kStageChunkBytes) return nullptr;
    record(0);   // opens a recording
    if (stage_used_ + n > kStageChunkBytes) ++stage_chunk_, stage_used_ = 0;
    if (stage_chunk_ == kStageChunks) {   // every chunk is in use by queued or open work
        flush();
        record(0);
    }
    if (stage_chunk_ == staging_.size())
        staging_.push_back(ctx_.create_buffer("staging", kStageChunkBytes, MemoryKind::Staging));
    *buf = &staging_[stage_chunk_];
    *off = stage_used_;
    stage_used_ += (n + 15) / 16 * 16;
    return static_cast<uint8_t*>((*buf)->mapped()) + *off;
}

void DeviceMemory::upload(Buffer& dst, uint64_t offset, const void* src, uint64_t n) {
    if (!n) return;
    Buffer* staged = nullptr;
    uint64_t at = 0;
    if (uint8_t* p = stage(n, &staged, &at)) {
        memcpy(p, src, n);
        ctx_.copy(*staged, at, dst, offset, n);
        return;
    }
    flush();
    Buffer staging = ctx_.create_buffer(dst.name() + " (staging)", n, MemoryKind::Staging);
    memcpy(staging.mapped(), src, n);
    ctx_.begin();
    ctx_.copy(staging, 0, dst, offset, n);
    ctx_.submit_and_wait();
}

void DeviceMemory::download(const Buffer& src, uint64_t offset, void* dst, uint64_t n) {
    if (!n) return;
    Buffer* staged = nullptr;
    uint64_t at = 0;
    if (const uint8_t* p = stage(n, &staged, &at)) {
        ctx_.copy(src, offset, *staged, at, n);
        flush();   // the staging bytes stay as the submission left them until the next upload
        memcpy(dst, p, n);
        return;
    }
    flush();
    Buffer staging = ctx_.create_buffer(src.name() + " (staging)", n, MemoryKind::Staging);
    ctx_.begin();
    ctx_.copy(src, offset, staging, 0, n);
    ctx_.submit_and_wait();
    memcpy(dst, staging.mapped(), n);
}

DeviceBuffer::DeviceBuffer(std::shared_ptr<DeviceMemory> mem, size_t bytes, const std::string& what)
    : mem_(std::move(mem)) {
    buffer_ = mem_->ctx().create_buffer(what, bytes, MemoryKind::DeviceLocal);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    reserved_ = (bytes + page) / page * page;   // one byte more than asked: p + bytes is inside too
    void* range = mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) throw std::bad_alloc();
    mem_->record();
    mem_->ctx().fill_zero(buffer_, 0, (std::max<uint64_t>(bytes, 4) + 3) / 4 * 4);
    data_ = static_cast<uint8_t*>(range);
    bytes_ = bytes;
    mem_->buffers_[reinterpret_cast<uintptr_t>(range)] = &buffer_;
}

DeviceBuffer::~DeviceBuffer() {
    // Recorded work may still use the buffer: it runs before the memory goes.
    try {
        mem_->flush();
    } catch (...) {   // a lost device: the buffer goes regardless
    }
    mem_->buffers_.erase(reinterpret_cast<uintptr_t>(data_));
    munmap(data_, reserved_);
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
