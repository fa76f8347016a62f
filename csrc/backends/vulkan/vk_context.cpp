// vk_context.cpp — device, queue, buffers, pipelines and submission (see vk_context.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backends/vulkan/spirv_registry.h"

namespace lll::vk {

namespace {

constexpr uint32_t kDefaultDispatchesPerSubmit = 1000;
constexpr double kDefaultSubmitMs = 200.0;

// Command buffers kept for resubmission: the submissions of a decode step of up to
// kStepDispatches dispatches (an 80-layer model's), split as max_dispatches_per_submit says, for
// kShapes batch shapes at once, and at least kMinKept (room for prompts between steps).
constexpr size_t kStepDispatches = 2048, kShapes = 4, kMinKept = 64;
size_t kept_recordings() {
    const size_t per_step = (kStepDispatches + max_dispatches_per_submit() - 1) / max_dispatches_per_submit();
    return std::max(kMinKept, kShapes * per_step);
}

// LOCALLLM_VULKAN_REPLAY=0 records every submission afresh (the comparison and the fallback).
bool replay_enabled() {
    const char* v = getenv("LOCALLLM_VULKAN_REPLAY");
    return !(v && strcmp(v, "0") == 0);
}

uint32_t compute_queue_family(const InstanceFns& f, VkPhysicalDevice pd) {
    uint32_t n = 0;
    f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n);
    f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
    // A compute family without graphics first: on discrete GPUs it is the async compute engine.
    for (uint32_t i = 0; i < n; ++i)
        if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return i;
    for (uint32_t i = 0; i < n; ++i)
        if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
    throw std::runtime_error("Vulkan device has no compute queue");
}

// A knob read from the environment: unset or empty gives `fallback`; anything but a number in
// [lo, hi] (a whole one where `whole`) is an error naming the variable, what it counts and the range.
struct EnvKnob {
    const char* name;
    const char* what;
    double lo, hi, fallback;
    bool whole;
};

double env_number(const EnvKnob& k) {
    const char* v = getenv(k.name);
    if (!v || !*v) return k.fallback;
    char* end = nullptr;
    const double x = strtod(v, &end);
    if (*end || !(x >= k.lo && x <= k.hi) || (k.whole && x != floor(x))) {
        char range[64];
        snprintf(range, sizeof range, " from %.15g to %.15g", k.lo, k.hi);
        throw std::invalid_argument(std::string(k.name) + "=" + v + ": expected " + k.what + range);
    }
    return x;
}

// Read at every wait, so a test may shorten it on a loaded model; checked when a context is made.
double timeout_seconds() {
    return env_number({"LOCALLLM_VULKAN_TIMEOUT_S", "seconds", 1e-9, 1e7, 120.0, false});
}

// LOCALLLM_VULKAN_BUDGET=<bytes>: the device memory one context may allocate (0 = no cap). A test
// knob: allocations past it fail as a full device would, so the error path runs on any machine.
uint64_t budget_bytes() {
    return (uint64_t)env_number({"LOCALLLM_VULKAN_BUDGET", "a whole number of bytes (0: no cap)", 0, 1e15, 0, true});
}

const SpirvBlob& find_blob(const std::string& name) {
    for (size_t i = 0; i < k_spirv_blob_count; ++i)
        if (name == k_spirv_blobs[i].name) return k_spirv_blobs[i];
    throw std::invalid_argument("no embedded Vulkan kernel named " + name);
}

}  // namespace

uint32_t max_dispatches_per_submit() {
    return (uint32_t)env_number({"LOCALLLM_VULKAN_MAX_DISPATCHES_PER_SUBMIT", "a whole number of dispatches", 1, 1e6,
                                 kDefaultDispatchesPerSubmit, true});
}

double max_seconds_per_submit() {
    return env_number({"LOCALLLM_VULKAN_MAX_SUBMIT_MS", "milliseconds of estimated work", 0.001, 1e6,
                       kDefaultSubmitMs, false}) / 1e3;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        release();
        ctx_ = o.ctx_, buffer_ = o.buffer_, memory_ = o.memory_, size_ = o.size_, mapped_ = o.mapped_;
        device_bytes_ = o.device_bytes_;
        name_ = std::move(o.name_);
        o.ctx_ = nullptr, o.buffer_ = VK_NULL_HANDLE, o.memory_ = VK_NULL_HANDLE, o.mapped_ = nullptr, o.size_ = 0;
        o.device_bytes_ = 0;
    }
    return *this;
}

void Buffer::release() {
    if (!ctx_) return;
    const DeviceFns& f = ctx_->fns_;
    // Queued work may still read it; a kept command buffer that binds it must never be resubmitted.
    if (ctx_->busy()) ctx_->wait_idle_or_drain();
    if (ctx_->recordings_) ctx_->recordings_->forget();
    if (mapped_) f.vkUnmapMemory(ctx_->device_, memory_);
    if (buffer_) f.vkDestroyBuffer(ctx_->device_, buffer_, nullptr);
    if (memory_) f.vkFreeMemory(ctx_->device_, memory_, nullptr);
    ctx_->device_bytes_ -= device_bytes_;
    device_bytes_ = 0;
    ctx_ = nullptr, buffer_ = VK_NULL_HANDLE, memory_ = VK_NULL_HANDLE, mapped_ = nullptr, size_ = 0;
}

Context::Context(int device_index) : instance_(Instance::get()), info_(instance_.device(device_index)) {
    // A bad knob is an error before anything is created.
    const size_t kept = kept_recordings();
    timeout_seconds();
    budget_bytes();
    const InstanceFns& ifn = instance_.fns();
    queue_family_ = compute_queue_family(ifn, info_.handle);
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = queue_family_;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    // The integer-dot kernels (linear_matvec_q8) need the feature enabled on the device.
    VkPhysicalDeviceShaderIntegerDotProductFeatures idot{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    std::vector<const char*> exts;
    if (info_.integer_dot_product) {
        idot.shaderIntegerDotProduct = VK_TRUE;
        di.pNext = &idot;
        exts.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    }
    // The spec requires it enabled where listed (MoltenVK); our kernels use nothing it restricts.
    if (info_.portability_subset) exts.push_back("VK_KHR_portability_subset");
    di.enabledExtensionCount = (uint32_t)exts.size();
    di.ppEnabledExtensionNames = exts.data();
    check(ifn.vkCreateDevice(info_.handle, &di, nullptr, &device_), ("vkCreateDevice on " + info_.name).c_str());
    context_opened();
    try {
        load_device_fns(ifn, device_, &fns_);
    } catch (...) {
        // No table to destroy it with yet: ask the instance directly.
        auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(ifn.vkGetDeviceProcAddr(device_, "vkDestroyDevice"));
        if (destroy) destroy(device_, nullptr);
        throw;
    }
    fns_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
    instance_.fns().vkGetPhysicalDeviceMemoryProperties(info_.handle, &mem_props_);
    max_buffer_bytes_ = std::min<uint64_t>({kMaxAllocationBytes, info_.max_storage_buffer_range,
                                            info_.max_allocation_bytes ? info_.max_allocation_bytes : kMaxAllocationBytes});
    max_buffer_bytes_ -= kBufferPadBytes;

    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = queue_family_;
    check(fns_.vkCreateCommandPool(device_, &pi, nullptr, &cmd_pool_), "vkCreateCommandPool");
    recordings_ = std::make_unique<RecordingCache>(fns_, device_, cmd_pool_, replay_enabled(), kept);
}

Context::~Context() {
    if (!device_) return;
    fns_.vkDeviceWaitIdle(device_);
    scratch_.release();   // buffers the context owns go before their device
    retired_.clear();
    recordings_.reset();   // its descriptor pools; its command buffers go with the command pool
    for (auto& kv : pipelines_) {
        fns_.vkDestroyPipeline(device_, kv.second.pipeline, nullptr);
        fns_.vkDestroyPipelineLayout(device_, kv.second.layout, nullptr);
        fns_.vkDestroyDescriptorSetLayout(device_, kv.second.set_layout, nullptr);
    }
    for (const Queued& q : queued_) fns_.vkDestroyFence(device_, q.fence, nullptr);
    for (VkFence f : free_fences_) fns_.vkDestroyFence(device_, f, nullptr);
    if (cmd_pool_) fns_.vkDestroyCommandPool(device_, cmd_pool_, nullptr);
    fns_.vkDestroyDevice(device_, nullptr);
    context_closed();
}

void Context::check_usable() const {
    if (!broken_.empty()) throw std::runtime_error("Vulkan device " + info_.name + " is unusable: " + broken_);
}

uint32_t Context::find_memory_type(uint32_t type_bits, MemoryKind kind) const {
    const VkMemoryPropertyFlags want = kind == MemoryKind::DeviceLocal
                                           ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
                                           : VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i)
        if ((type_bits & (1u << i)) && (mem_props_.memoryTypes[i].propertyFlags & want) == want) return i;
    // A device without a device-local type for buffers (rare) still computes from host memory.
    if (kind == MemoryKind::DeviceLocal)
        for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i)
            if (type_bits & (1u << i)) return i;
    throw std::runtime_error("Vulkan device " + info_.name + " has no suitable memory type");
}

Buffer Context::create_buffer(const std::string& name, uint64_t bytes, MemoryKind kind) {
    check_usable();
    if (bytes > max_buffer_bytes_)
        throw std::length_error("Vulkan buffer '" + name + "' of " + std::to_string(bytes) + " bytes exceeds the " +
                                std::to_string(max_buffer_bytes_) + "-byte limit of one buffer on " + info_.name);
    Buffer b;
    b.ctx_ = this;
    b.size_ = bytes;
    b.name_ = name;
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = std::max<uint64_t>(bytes, 4) + kBufferPadBytes;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    check(fns_.vkCreateBuffer(device_, &bi, nullptr, &b.buffer_), ("vkCreateBuffer '" + name + "'").c_str());
    VkMemoryRequirements req;
    fns_.vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
    const uint64_t budget = kind == MemoryKind::DeviceLocal ? budget_bytes() : 0;
    if (budget && device_bytes_ + req.size > budget)
        throw std::runtime_error("Vulkan allocation of " + std::to_string(req.size) + " bytes for '" + name +
                                 "' exceeds LOCALLLM_VULKAN_BUDGET=" + std::to_string(budget) + " (" +
                                 std::to_string(device_bytes_) + " in use)");
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = find_memory_type(req.memoryTypeBits, kind);
    const VkResult r = fns_.vkAllocateMemory(device_, &ai, nullptr, &b.memory_);
    if (r != VK_SUCCESS)
        throw std::runtime_error("Vulkan allocation of " + std::to_string(req.size) + " bytes for '" + name + "' on " +
                                 info_.name + " failed: " + result_name(r));
    check(fns_.vkBindBufferMemory(device_, b.buffer_, b.memory_, 0), "vkBindBufferMemory");
    if (kind == MemoryKind::DeviceLocal) {
        b.device_bytes_ = req.size;
        device_bytes_ += req.size;
    }
    if (kind == MemoryKind::Staging)
        check(fns_.vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &b.mapped_), "vkMapMemory");
    return b;
}

void Context::upload(Buffer& dst, const void* src, uint64_t bytes) {
    if (bytes > dst.size()) throw std::invalid_argument("upload of " + std::to_string(bytes) + " bytes into '" + dst.name() + "'");
    Buffer staging = create_buffer(dst.name() + " (staging)", bytes, MemoryKind::Staging);
    memcpy(staging.mapped(), src, bytes);
    begin();
    copy(staging, dst, bytes);
    submit_and_wait();
}

const Buffer& Context::scratch(uint64_t bytes) {
    if (scratch_.handle() && scratch_.size() >= bytes) return scratch_;
    Buffer bigger = create_buffer("scratch", bytes, MemoryKind::DeviceLocal);
    if (scratch_.handle()) retired_.push_back(std::move(scratch_));
    scratch_ = std::move(bigger);
    return scratch_;
}

void Context::download(const Buffer& src, void* dst, uint64_t bytes) {
    if (bytes > src.size()) throw std::invalid_argument("download of " + std::to_string(bytes) + " bytes from '" + src.name() + "'");
    Buffer staging = create_buffer(src.name() + " (staging)", bytes, MemoryKind::Staging);
    begin();
    copy(src, staging, bytes);
    submit_and_wait();
    memcpy(dst, staging.mapped(), bytes);
}

const Pipeline& Context::pipeline(const std::string& kernel, uint32_t n_buffers, uint32_t push_bytes,
                                  const std::vector<uint32_t>& spec) {
    std::string key = kernel;
    for (uint32_t v : spec) key += "/" + std::to_string(v);
    auto it = pipelines_.find(key);
    if (it != pipelines_.end()) return it->second;
    check_usable();
    const SpirvBlob& blob = find_blob(kernel);
    Pipeline p;
    p.n_buffers = n_buffers, p.push_bytes = push_bytes;
    std::vector<VkDescriptorSetLayoutBinding> binds(n_buffers);
    for (uint32_t i = 0; i < n_buffers; ++i)
        binds[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = n_buffers;
    li.pBindings = binds.data();
    check(fns_.vkCreateDescriptorSetLayout(device_, &li, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &p.set_layout;
    pli.pushConstantRangeCount = push_bytes ? 1 : 0;
    pli.pPushConstantRanges = &range;
    check(fns_.vkCreatePipelineLayout(device_, &pli, nullptr, &p.layout), "vkCreatePipelineLayout");
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = blob.size;
    mi.pCode = reinterpret_cast<const uint32_t*>(blob.code);
    VkShaderModule module;
    check(fns_.vkCreateShaderModule(device_, &mi, nullptr, &module), ("vkCreateShaderModule " + kernel).c_str());
    std::vector<VkSpecializationMapEntry> entries(spec.size());
    for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4u, 4};
    VkSpecializationInfo si{(uint32_t)spec.size(), entries.data(), spec.size() * 4, spec.data()};
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
    ci.layout = p.layout;
    const VkResult r = fns_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipeline);
    fns_.vkDestroyShaderModule(device_, module, nullptr);
    if (r != VK_SUCCESS) {
        fns_.vkDestroyPipelineLayout(device_, p.layout, nullptr);
        fns_.vkDestroyDescriptorSetLayout(device_, p.set_layout, nullptr);
        check(r, ("vkCreateComputePipelines " + kernel).c_str());
    }
    return pipelines_.emplace(key, p).first->second;
}

void Context::begin() {
    check_usable();
    // A recording abandoned by an exception (bad arguments found mid-way) is discarded: nothing
    // of it was recorded into a command buffer or submitted.
    tape_.clear();
    tape_work_ = 0.0;
    recording_ = true;
}

void Context::add_work(double seconds) {
    tape_work_ += seconds;
    CommandStats& stats = command_stats();
    stats.largest_op_s = std::max(stats.largest_op_s, seconds);
}

void Context::dispatch(const Pipeline& p, const std::vector<const Buffer*>& buffers, const void* push,
                       uint32_t gx, uint32_t gy, uint32_t gz) {
    std::vector<BufferRange> ranges;
    for (const Buffer* b : buffers) ranges.push_back(BufferRange{b, 0});
    dispatch(p, ranges, push, gx, gy, gz);
}

void Context::dispatch(const Pipeline& p, const std::vector<BufferRange>& buffers, const void* push,
                       uint32_t gx, uint32_t gy, uint32_t gz) {
    if (!recording_) throw std::logic_error("Vulkan context: dispatch() outside begin()/submit_and_wait()");
    if (buffers.size() != p.n_buffers) throw std::logic_error("Vulkan dispatch: wrong number of buffers");
    for (int i = 0; i < 3; ++i) {
        const uint32_t g = i == 0 ? gx : i == 1 ? gy : gz;
        if (g > info_.max_workgroup_count[i])
            throw std::length_error("Vulkan dispatch of " + std::to_string(g) + " workgroups exceeds the device's " +
                                    std::to_string(info_.max_workgroup_count[i]));
    }
    if (gx == 0 || gy == 0 || gz == 0) return;
    constexpr size_t kMaxBindings = 8;
    if (buffers.size() > kMaxBindings) throw std::logic_error("Vulkan dispatch: more than 8 buffers");
    VkDescriptorBufferInfo infos[kMaxBindings];
    for (size_t i = 0; i < buffers.size(); ++i) {
        const BufferRange& r = buffers[i];
        if (!bindable_offset(r.offset) || r.offset > r.buffer->size())
            throw std::logic_error("Vulkan dispatch: offset " + std::to_string(r.offset) + " into '" +
                                   r.buffer->name() + "' is not bindable");
        infos[i] = {r.buffer->handle(), r.offset, VK_WHOLE_SIZE};
    }
    tape_.dispatch(p, infos, (uint32_t)buffers.size(), push, gx, gy, gz);
}

void Context::copy(const Buffer& src, uint64_t src_offset, Buffer& dst, uint64_t dst_offset, uint64_t bytes) {
    if (!recording_) throw std::logic_error("Vulkan context: copy() outside begin()/submit_and_wait()");
    if (src_offset + bytes > std::max<uint64_t>(src.size(), 4) || dst_offset + bytes > std::max<uint64_t>(dst.size(), 4))
        throw std::out_of_range("Vulkan copy of " + std::to_string(bytes) + " bytes from '" + src.name() + "'+" +
                                std::to_string(src_offset) + " to '" + dst.name() + "'+" + std::to_string(dst_offset) +
                                " runs past a buffer");
    const VkBufferCopy region{src_offset, dst_offset, bytes};
    tape_.copy(src.handle(), dst.handle(), &region, bytes ? 1 : 0);
}

void Context::copy_regions(const Buffer& src, Buffer& dst, const std::vector<VkBufferCopy>& regions) {
    if (!recording_) throw std::logic_error("Vulkan context: copy_regions() outside begin()/submit_and_wait()");
    for (const VkBufferCopy& r : regions)
        if (r.srcOffset + r.size > std::max<uint64_t>(src.size(), 4) || r.dstOffset + r.size > std::max<uint64_t>(dst.size(), 4))
            throw std::out_of_range("Vulkan copy from '" + src.name() + "' to '" + dst.name() + "' runs past a buffer");
    tape_.copy(src.handle(), dst.handle(), regions.data(), (uint32_t)regions.size());
}

void Context::fill_zero(Buffer& dst, uint64_t offset, uint64_t bytes) {
    if (!recording_) throw std::logic_error("Vulkan context: fill_zero() outside begin()/submit_and_wait()");
    tape_.fill_zero(dst.handle(), offset, bytes);
}

void Context::submit() {
    if (!recording_) throw std::logic_error("Vulkan context: submit() without begin()");
    // A kept command buffer still queued is waited for before it is resubmitted or recorded over.
    auto before_reuse = [this](VkCommandBuffer cmd) {
        for (const Queued& q : queued_)
            if (q.cmd == cmd) return wait_idle();
    };
    bool recorded = false;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkResult r = VK_SUCCESS;
    try {   // the recording stays open (its scratch buffers kept) until it is queued or abandoned
        cmd = recordings_->get(tape_, &recorded, before_reuse);
        if (queued_.size() >= kMaxQueued) wait_oldest();
        if (free_fences_.empty()) {
            VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
            VkFence f = VK_NULL_HANDLE;
            check(fns_.vkCreateFence(device_, &fi, nullptr, &f), "vkCreateFence");
            free_fences_.push_back(f);
        }
        VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cmd;
        r = fns_.vkQueueSubmit(queue_, 1, &si, free_fences_.back());
    } catch (...) {
        recording_ = false;
        throw;
    }
    recording_ = false;
    if (r == VK_ERROR_DEVICE_LOST) broken_ = "device lost";
    check(r, ("Vulkan submission on " + info_.name).c_str());
    const VkFence fence = free_fences_.back();
    free_fences_.pop_back();
    CommandStats& stats = command_stats();
    ++stats.submits;
    (recorded ? stats.recordings : stats.replays) += 1;
    if (!queued_.empty()) ++stats.queued_behind;
    stats.dispatches += tape_.dispatches();
    stats.largest_submit = std::max<uint64_t>(stats.largest_submit, tape_.dispatches());
    stats.work_s += tape_work_;
    stats.largest_submit_s = std::max(stats.largest_submit_s, tape_work_);
    queued_.push_back(Queued{fence, cmd});
}

void Context::wait_oldest() {
    const Queued q = queued_.front();
    const double limit = timeout_seconds();
    const VkResult r = fns_.vkWaitForFences(device_, 1, &q.fence, VK_TRUE, (uint64_t)(limit * 1e9));
    if (r == VK_TIMEOUT) {
        char seconds[32];
        snprintf(seconds, sizeof seconds, "%g", limit);
        broken_ = std::string("a submission did not finish within ") + seconds +
                  " s (LOCALLLM_VULKAN_TIMEOUT_S); the device may be hung";
        throw std::runtime_error("Vulkan device " + info_.name + ": " + broken_);
    }
    if (r == VK_ERROR_DEVICE_LOST) broken_ = "device lost";
    check(r, ("Vulkan submission on " + info_.name).c_str());
    queued_.pop_front();
    check(fns_.vkResetFences(device_, 1, &q.fence), "vkResetFences");
    free_fences_.push_back(q.fence);
}

void Context::wait_idle_or_drain() noexcept {
    try {
        wait_idle();
        return;
    } catch (...) {
    }
    // Past a timeout the device is unusable, but its queue may still be running work that reads
    // the buffer about to go: wait for the queue, as long as the driver takes (a lost device
    // returns at once; a hung one is reset by the driver's watchdog), never freeing under it.
    fns_.vkQueueWaitIdle(queue_);
    for (const Queued& q : queued_) {
        fns_.vkResetFences(device_, 1, &q.fence);
        free_fences_.push_back(q.fence);
    }
    queued_.clear();
}

void Context::wait_idle() {
    if (!queued_.empty()) {
        check_usable();   // after a timeout, never a second wait of as long
        ++command_stats().waits;
    }
    while (!queued_.empty()) wait_oldest();
    if (recording_) return;   // the open recording may bind a replaced scratch buffer
    std::vector<Buffer> old;
    old.swap(retired_);   // released here, after the swap: releasing one may call back into wait_idle
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
