// vk_instance.h — the process's Vulkan instance and the physical devices it sees.
#pragma once
#include "backends/vulkan/vk_loader.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lll::vk {

// What localllm needs to know about one physical device (listed by `localllm info --devices`).
struct DeviceInfo {
    int index = -1;               // position in the de-duplicated list: "vulkan:N"
    VkPhysicalDevice handle = VK_NULL_HANDLE;
    std::string name;
    std::string type;             // "discrete", "integrated", "virtual", "cpu", "other"
    uint32_t vendor_id = 0, device_id = 0;
    uint32_t api_version = 0;
    std::string driver;           // driver name and info (1.2+ devices), e.g. "llvmpipe Mesa 22.3.6"
    uint64_t total_bytes = 0;     // sum of the device-local heaps
    uint64_t free_bytes = 0;      // VK_EXT_memory_budget's budget - usage, else the heap size
    bool memory_budget = false;   // free_bytes is from VK_EXT_memory_budget
    uint32_t subgroup_size = 0;
    bool subgroup_arithmetic = false;   // subgroupAdd in compute shaders: our kernels' reductions
    bool fp16 = false, int8 = false, storage_8bit = false, storage_16bit = false;
    bool integer_dot_product = false, cooperative_matrix = false;
    // VK_KHR_portability_subset: a layered implementation (MoltenVK on Apple GPUs) that a device
    // must enable when it lists it.
    bool portability_subset = false;
    // integer_dot_product: VK_KHR_shader_integer_dot_product with shaderIntegerDotProduct;
    // accelerated: the driver's word that packed int8 dot products run faster than the equivalent
    // plain integer code (false on lavapipe).
    bool integer_dot_accelerated = false;
    uint64_t max_storage_buffer_range = 0, max_allocation_bytes = 0;
    uint64_t min_storage_offset_alignment = 256;   // a bound buffer's offset must be a multiple
    uint32_t max_workgroup_count[3] = {0, 0, 0};
    uint32_t max_shared_bytes = 0, max_workgroup_invocations = 0;
    bool usable = false;          // meets what our kernels need (1.1, subgroup arithmetic)
    std::string unusable_reason;
};

// Validation-layer messages of warning or error severity, routed here by the debug-utils
// messenger when LOCALLLM_VULKAN_VALIDATE=1 (the tests assert none arrived).
struct ValidationLog {
    std::atomic<uint64_t> count{0};
    std::mutex mu;
    std::vector<std::string> first;   // the first few, for the test's failure message
};
ValidationLog& validation_log();

// The one instance of the process (created on first use). Throws std::runtime_error naming the
// problem when there is no loader or the instance cannot be created.
class Instance {
public:
    static Instance& get();
    // Like get() but nullptr (and the reason) instead of throwing: device listing on machines
    // without Vulkan is not an error.
    static Instance* try_get(std::string* why);
    ~Instance();

    const Loader& loader() const { return *loader_; }
    const InstanceFns& fns() const { return fns_; }
    VkInstance handle() const { return instance_; }
    bool validating() const { return messenger_ != VK_NULL_HANDLE; }
    const std::vector<DeviceInfo>& devices() const { return devices_; }
    // The device a default "vulkan" placement uses: discrete before integrated before virtual;
    // CPU implementations only when LOCALLLM_VULKAN_ALLOW_CPU=1. -1 when none.
    int default_device() const;
    // Validates a "vulkan:N" index (a CPU device is allowed when named); throws otherwise.
    const DeviceInfo& device(int index) const;

private:
    Instance() = default;
    void create(const Loader& l);
    void enumerate();

    const Loader* loader_ = nullptr;
    InstanceFns fns_;
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    std::vector<DeviceInfo> devices_;
};

// Destroy the instance (Python's atexit, before the interpreter and the drivers go away), unless a
// context made from it is still open (then it is left to the process's end).
void shutdown_instance();
// Contexts (vk_context.h) count themselves, so shutdown_instance knows whether any is open.
void context_opened();
void context_closed();

}  // namespace lll::vk
