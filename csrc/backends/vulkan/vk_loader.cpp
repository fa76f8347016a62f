// vk_loader.cpp — dlopen of the Vulkan loader and the function tables (see vk_loader.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_loader.h"

#include <stdexcept>

#if defined(_WIN32)
// TODO(windows): LoadLibraryA("vulkan-1.dll") / GetProcAddress.
#else
#include <dlfcn.h>
#endif

namespace lll::vk {

static Loader open_loader(std::string* why) {
    Loader l;
#if defined(_WIN32)
    *why = "the Vulkan loader is not yet opened on Windows";
    return l;
#else
    const char* env = getenv("LOCALLLM_VULKAN_LOADER");
    const char* candidates[] = {env && *env ? env : "libvulkan.so.1", env && *env ? nullptr : "libvulkan.so"};
    void* lib = nullptr;
    std::string errors;
    for (const char* name : candidates) {
        if (!name) continue;
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            l.path = name;
            break;
        }
        const char* e = dlerror();
        errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name);
    }
    if (!lib) {
        *why = "no Vulkan loader: " + errors;
        return l;
    }
    l.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!l.vkGetInstanceProcAddr) {
        *why = l.path + " has no vkGetInstanceProcAddr";
        return l;
    }
#define LLL_VK_LOAD_GLOBAL(name) l.name = reinterpret_cast<PFN_##name>(l.vkGetInstanceProcAddr(nullptr, #name));
    LLL_VK_GLOBAL_FNS(LLL_VK_LOAD_GLOBAL)
#undef LLL_VK_LOAD_GLOBAL
    if (!l.vkCreateInstance) *why = l.path + " has no vkCreateInstance";
    // A 1.0 loader has no vkEnumerateInstanceVersion; the compute context needs 1.1 (subgroups).
    else if (!l.vkEnumerateInstanceVersion) *why = l.path + " is a Vulkan 1.0 loader (1.1 needed)";
    return l;
#endif
}

const Loader* loader(std::string* why) {
    static std::string failure;
    static const Loader the_loader = open_loader(&failure);
    if (!failure.empty()) {
        if (why) *why = failure;
        return nullptr;
    }
    return &the_loader;
}

void load_instance_fns(const Loader& l, VkInstance instance, InstanceFns* fns) {
#define LLL_VK_LOAD_INSTANCE(name) fns->name = reinterpret_cast<PFN_##name>(l.vkGetInstanceProcAddr(instance, #name));
    LLL_VK_INSTANCE_FNS(LLL_VK_LOAD_INSTANCE)
#undef LLL_VK_LOAD_INSTANCE
}

void load_device_fns(const InstanceFns& ifns, VkDevice device, DeviceFns* fns) {
#define LLL_VK_LOAD_DEVICE(name)                                                      \
    fns->name = reinterpret_cast<PFN_##name>(ifns.vkGetDeviceProcAddr(device, #name)); \
    if (!fns->name) throw std::runtime_error("Vulkan device lacks entry point " #name);
    LLL_VK_DEVICE_FNS(LLL_VK_LOAD_DEVICE)
#undef LLL_VK_LOAD_DEVICE
}

const char* result_name(VkResult r) {
    switch (r) {
        case VK_SUCCESS: return "VK_SUCCESS";
        case VK_NOT_READY: return "VK_NOT_READY";
        case VK_TIMEOUT: return "VK_TIMEOUT";
        case VK_INCOMPLETE: return "VK_INCOMPLETE";
        case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
        case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
        case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
        case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
        case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
        case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
        case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
        case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
        case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
        case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
        case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
        default: return "VkResult error";
    }
}

void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + ": " + result_name(r) + " (" + std::to_string((int)r) + ")");
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
