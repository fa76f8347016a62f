// vk_instance.cpp — instance creation, the validation messenger and device enumeration.
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_instance.h"

#include <string.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>

namespace lll::vk {

namespace {

std::mutex g_instance_mu;
std::unique_ptr<Instance> g_instance;
std::string g_instance_error;   // why the last creation failed (not retried: the answer won't change)

bool env_on(const char* name) {
    const char* v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
    ValidationLog& log = validation_log();
    log.count.fetch_add(1);
    std::lock_guard<std::mutex> lock(log.mu);
    if (log.first.size() < 8) {
        const char* sev = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning";
        log.first.push_back(std::string(sev) + ": " + (data && data->pMessage ? data->pMessage : "?"));
    }
    return VK_FALSE;   // never abort the call: the count is what the tests check
}

template <typename Props, typename Enumerate>
std::vector<Props> enumerate_all(Enumerate fn) {
    uint32_t n = 0;
    fn(&n, nullptr);
    std::vector<Props> out(n);
    if (n) fn(&n, out.data());
    out.resize(n);
    return out;
}

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
    for (const auto& e : exts)
        if (strcmp(e.extensionName, name) == 0) return true;
    return false;
}

const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
        default: return "other";
    }
}

int type_rank(const std::string& type) {   // lower is preferred
    if (type == "discrete") return 0;
    if (type == "integrated") return 1;
    if (type == "virtual") return 2;
    if (type == "other") return 3;
    return 4;   // cpu
}

// Device-local heap sizes and what is free in them.
void read_memory(const InstanceFns& f, VkPhysicalDevice pd, DeviceInfo* d) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mem{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
    if (d->memory_budget) mem.pNext = &budget;
    f.vkGetPhysicalDeviceMemoryProperties2(pd, &mem);
    for (uint32_t h = 0; h < mem.memoryProperties.memoryHeapCount; ++h) {
        const VkMemoryHeap& heap = mem.memoryProperties.memoryHeaps[h];
        if (!(heap.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
        d->total_bytes += heap.size;
        uint64_t free_here = heap.size;
        if (d->memory_budget) {
            const uint64_t b = budget.heapBudget[h], u = budget.heapUsage[h];
            free_here = std::min<uint64_t>(b > u ? b - u : 0, heap.size);
        }
        d->free_bytes += free_here;
    }
}

// Features and subgroup properties; the feature structs chained are those the device's API
// version (or its extensions) define, so the query itself is valid usage.
void read_features(const InstanceFns& f, VkPhysicalDevice pd, const std::vector<VkExtensionProperties>& exts,
                   DeviceInfo* d) {
    VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &sub;
    sub.pNext = &m3;
    const bool v12 = d->api_version >= VK_API_VERSION_1_2;
    if (v12) m3.pNext = &drv;
    f.vkGetPhysicalDeviceProperties2(pd, &props);
    d->subgroup_size = sub.subgroupSize;
    d->subgroup_arithmetic = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                             (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    d->max_allocation_bytes = m3.maxMemoryAllocationSize;
    if (v12) d->driver = std::string(drv.driverName) + " " + drv.driverInfo;

    VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeatures idot{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    feats.pNext = &s16;
    if (v12) s16.pNext = &f12;
    // Through the extension even on 1.3 devices: the instance asks for API 1.2 (Instance::create),
    // so 1.3's core features are not ours to use.
    const bool idot_defined = has_extension(exts, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    if (idot_defined) idot.pNext = feats.pNext, feats.pNext = &idot;
    f.vkGetPhysicalDeviceFeatures2(pd, &feats);
    d->storage_16bit = s16.storageBuffer16BitAccess;
    d->fp16 = v12 && f12.shaderFloat16;
    d->int8 = v12 && f12.shaderInt8;
    d->storage_8bit = v12 && f12.storageBuffer8BitAccess;
    d->integer_dot_product = idot_defined && idot.shaderIntegerDotProduct;
    if (d->integer_dot_product) {
        VkPhysicalDeviceShaderIntegerDotProductProperties ip{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
        VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        p2.pNext = &ip;
        f.vkGetPhysicalDeviceProperties2(pd, &p2);
        d->integer_dot_accelerated = ip.integerDotProduct4x8BitPackedSignedAccelerated;
    }
    d->cooperative_matrix = has_extension(exts, "VK_KHR_cooperative_matrix");
}

DeviceInfo describe(const InstanceFns& f, VkPhysicalDevice pd) {
    DeviceInfo d;
    d.handle = pd;
    VkPhysicalDeviceProperties p;
    f.vkGetPhysicalDeviceProperties(pd, &p);
    d.name = p.deviceName;
    d.type = type_name(p.deviceType);
    d.vendor_id = p.vendorID;
    d.device_id = p.deviceID;
    d.api_version = p.apiVersion;
    d.max_storage_buffer_range = p.limits.maxStorageBufferRange;
    d.min_storage_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
    for (int i = 0; i < 3; ++i) d.max_workgroup_count[i] = p.limits.maxComputeWorkGroupCount[i];
    d.max_shared_bytes = p.limits.maxComputeSharedMemorySize;
    d.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
    if (d.api_version < VK_API_VERSION_1_1) {
        d.unusable_reason = "Vulkan 1.0 device (1.1 needed)";
        return d;
    }
    const auto exts = enumerate_all<VkExtensionProperties>(
        [&](uint32_t* n, VkExtensionProperties* out) { return f.vkEnumerateDeviceExtensionProperties(pd, nullptr, n, out); });
    d.memory_budget = has_extension(exts, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    d.portability_subset = has_extension(exts, "VK_KHR_portability_subset");
    read_features(f, pd, exts, &d);
    read_memory(f, pd, &d);
    if (!d.subgroup_arithmetic) d.unusable_reason = "no subgroup arithmetic in compute shaders";
    else if (d.max_shared_bytes < 20 * 1024) d.unusable_reason = "less than 20 KiB of workgroup shared memory";
    else if (d.max_workgroup_invocations < 256) d.unusable_reason = "fewer than 256 invocations per workgroup";
    d.usable = d.unusable_reason.empty();
    return d;
}

// The same GPU exposed twice (two drivers, or an integrated and a discrete face of one part)
// has one deviceUUID: keep the preferred copy (discrete first), once.
std::vector<DeviceInfo> dedupe(const InstanceFns& f, std::vector<DeviceInfo> all) {
    std::vector<std::pair<std::string, DeviceInfo>> kept;
    for (auto& d : all) {
        VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
        VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        props.pNext = &id;
        std::string key = d.name + "/" + std::to_string(d.vendor_id) + "/" + std::to_string(d.device_id);
        if (d.api_version >= VK_API_VERSION_1_1) {
            f.vkGetPhysicalDeviceProperties2(d.handle, &props);
            key = std::string(reinterpret_cast<const char*>(id.deviceUUID), VK_UUID_SIZE);
        }
        auto same = std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.first == key; });
        if (same == kept.end()) kept.emplace_back(key, std::move(d));
        else if (type_rank(d.type) < type_rank(same->second.type) || (!same->second.usable && d.usable))
            same->second = std::move(d);
    }
    std::vector<DeviceInfo> out;
    for (auto& k : kept) {
        k.second.index = (int)out.size();
        out.push_back(std::move(k.second));
    }
    return out;
}

}  // namespace

ValidationLog& validation_log() {
    static ValidationLog log;
    return log;
}

void Instance::create(const Loader& l) {
    loader_ = &l;
    const auto layers = enumerate_all<VkLayerProperties>(
        [&](uint32_t* n, VkLayerProperties* out) { return l.vkEnumerateInstanceLayerProperties(n, out); });
    const auto exts = enumerate_all<VkExtensionProperties>(
        [&](uint32_t* n, VkExtensionProperties* out) { return l.vkEnumerateInstanceExtensionProperties(nullptr, n, out); });
    std::vector<const char*> want_layers, want_exts;
    const bool validate = env_on("LOCALLLM_VULKAN_VALIDATE");
    if (validate) {
        const char* layer = "VK_LAYER_KHRONOS_validation";
        if (std::none_of(layers.begin(), layers.end(), [&](const auto& p) { return strcmp(p.layerName, layer) == 0; }))
            throw std::runtime_error("LOCALLLM_VULKAN_VALIDATE=1 but the Vulkan validation layer is not installed "
                                     "(Debian/Ubuntu: vulkan-validationlayers)");
        if (!has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
            throw std::runtime_error("LOCALLLM_VULKAN_VALIDATE=1 but the loader lacks VK_EXT_debug_utils");
        want_layers.push_back(layer);
        want_exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    }
    // Portability drivers (MoltenVK) are enumerated only when the instance asks for them.
    VkInstanceCreateFlags flags = 0;
    if (has_extension(exts, "VK_KHR_portability_enumeration")) {
        want_exts.push_back("VK_KHR_portability_enumeration");
        flags |= 0x00000001;   // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
    }
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "localllm";
    app.pEngineName = "localllm";
    app.apiVersion = VK_API_VERSION_1_2;   // 1.1 devices still work: the device's version decides
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.flags = flags;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = (uint32_t)want_layers.size();
    ci.ppEnabledLayerNames = want_layers.data();
    ci.enabledExtensionCount = (uint32_t)want_exts.size();
    ci.ppEnabledExtensionNames = want_exts.data();
    check(l.vkCreateInstance(&ci, nullptr, &instance_), "vkCreateInstance");
    load_instance_fns(l, instance_, &fns_);
    if (validate) {
        VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        mi.pfnUserCallback = on_validation_message;
        check(fns_.vkCreateDebugUtilsMessengerEXT(instance_, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
    }
    enumerate();
}

void Instance::enumerate() {
    const auto pds = enumerate_all<VkPhysicalDevice>(
        [&](uint32_t* n, VkPhysicalDevice* out) { return fns_.vkEnumeratePhysicalDevices(instance_, n, out); });
    std::vector<DeviceInfo> all;
    for (VkPhysicalDevice pd : pds) all.push_back(describe(fns_, pd));
    devices_ = dedupe(fns_, std::move(all));
}

Instance::~Instance() {
    if (messenger_) fns_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
    if (instance_) fns_.vkDestroyInstance(instance_, nullptr);
}

Instance* Instance::try_get(std::string* why) {
    std::lock_guard<std::mutex> lock(g_instance_mu);
    if (g_instance) return g_instance.get();
    if (g_instance_error.empty()) {
        std::string no_loader;
        const Loader* l = vk::loader(&no_loader);
        if (!l) {
            g_instance_error = no_loader;
        } else {
            std::unique_ptr<Instance> inst(new Instance());
            try {
                inst->create(*l);
                g_instance = std::move(inst);
                return g_instance.get();
            } catch (const std::exception& e) {
                g_instance_error = e.what();
            }
        }
    }
    if (why) *why = g_instance_error;
    return nullptr;
}

Instance& Instance::get() {
    std::string why;
    Instance* inst = try_get(&why);
    if (!inst) throw std::runtime_error("Vulkan unavailable: " + why);
    return *inst;
}

int Instance::default_device() const {
    const bool allow_cpu = env_on("LOCALLLM_VULKAN_ALLOW_CPU");
    int best = -1;
    for (const DeviceInfo& d : devices_) {
        if (!d.usable || (d.type == "cpu" && !allow_cpu)) continue;
        if (best < 0 || type_rank(d.type) < type_rank(devices_[best].type)) best = d.index;
    }
    return best;
}

const DeviceInfo& Instance::device(int index) const {
    if (index < 0 || index >= (int)devices_.size())
        throw std::invalid_argument("no Vulkan device vulkan:" + std::to_string(index) + " (" +
                                    std::to_string(devices_.size()) + " found)");
    const DeviceInfo& d = devices_[index];
    if (!d.usable) throw std::runtime_error("Vulkan device " + d.name + " cannot run localllm's kernels: " + d.unusable_reason);
    return d;
}

std::atomic<int> g_live_contexts{0};

void context_opened() { ++g_live_contexts; }
void context_closed() { --g_live_contexts; }

void shutdown_instance() {
    std::lock_guard<std::mutex> lock(g_instance_mu);
    // A model still alive at exit still owns a device made from the instance: destroying the
    // instance under it would leave that device dangling (and the validation layer reports it
    // and all its objects as leaked). The process is ending, so the instance is left to it.
    if (g_live_contexts > 0) (void)g_instance.release();
    else g_instance.reset();
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
