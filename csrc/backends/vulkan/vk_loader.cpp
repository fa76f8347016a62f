// vk_loader.cpp — the Vulkan loader opened at run time (dlopen, LoadLibrary) and the function
// tables (see vk_loader.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_loader.h"

#include <stdlib.h>

#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace lll::vk {

namespace {

// Where the loader is, by platform: the system's loader on Linux and Windows; on macOS the Vulkan
// SDK's or Homebrew's loader (whose directories a protected process's dlopen does not search by
// name), else MoltenVK itself, which exports vkGetInstanceProcAddr as a loader does.
#if defined(_WIN32)
const char* const kLoaderNames[] = {"vulkan-1.dll"};
#elif defined(__APPLE__)
const char* const kLoaderNames[] = {"libvulkan.1.dylib", "/usr/local/lib/libvulkan.1.dylib",
                                    "/opt/homebrew/lib/libvulkan.1.dylib", "libMoltenVK.dylib",
                                    "/usr/local/lib/libMoltenVK.dylib", "/opt/homebrew/lib/libMoltenVK.dylib"};
#else
const char* const kLoaderNames[] = {"libvulkan.so.1", "libvulkan.so"};
#endif

// The library's vkGetInstanceProcAddr (null with *error set when it does not open or lacks it).
PFN_vkGetInstanceProcAddr open_library(const char* name, std::string* error) {
#if defined(_WIN32)
    HMODULE lib = LoadLibraryA(name);
    if (!lib) {
        *error = std::string(name) + ": LoadLibrary failed (error " + std::to_string(GetLastError()) + ")";
        return nullptr;
    }
    auto fn = reinterpret_cast<PFN_vkGetInstanceProcAddr>(
        reinterpret_cast<void*>(GetProcAddress(lib, "vkGetInstanceProcAddr")));
#else
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = dlerror();
        *error = e ? e : name;
        return nullptr;
    }
    auto fn = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
#endif
    if (!fn) *error = std::string(name) + " has no vkGetInstanceProcAddr";
    return fn;
}

// LOCALLLM_VULKAN_LOADER names the one library to open; else the platform's names in turn.
Loader open_loader(std::string* why) {
    Loader l;
    const char* env = getenv("LOCALLLM_VULKAN_LOADER");
    std::vector<const char*> names;
    if (env && *env) names.push_back(env);
    else names.assign(std::begin(kLoaderNames), std::end(kLoaderNames));
    std::string errors;
    for (const char* name : names) {
        std::string error;
        l.vkGetInstanceProcAddr = open_library(name, &error);
        if (l.vkGetInstanceProcAddr) {
            l.path = name;
            break;
        }
        errors += (errors.empty() ? "" : "; ") + error;
    }
    if (!l.vkGetInstanceProcAddr) {
        *why = "no Vulkan loader: " + errors;
        return l;
    }
#define LLL_VK_LOAD_GLOBAL(name) l.name = reinterpret_cast<PFN_##name>(l.vkGetInstanceProcAddr(nullptr, #name));
    LLL_VK_GLOBAL_FNS(LLL_VK_LOAD_GLOBAL)
#undef LLL_VK_LOAD_GLOBAL
    if (!l.vkCreateInstance) *why = l.path + " has no vkCreateInstance";
    // A 1.0 loader has no vkEnumerateInstanceVersion; the compute context needs 1.1 (subgroups).
    else if (!l.vkEnumerateInstanceVersion) *why = l.path + " is a Vulkan 1.0 loader (1.1 needed)";
    return l;
}

}  // namespace

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
