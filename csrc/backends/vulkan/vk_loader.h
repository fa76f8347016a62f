// vk_loader.h — the Vulkan loader, opened at run time and never linked.
//
// _core is built with VK_NO_PROTOTYPES: every entry point comes from vkGetInstanceProcAddr /
// vkGetDeviceProcAddr through the tables below, so a build with Vulkan imports and runs on a
// machine with no Vulkan at all (the loader library is simply not found).
#pragma once
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <string>

namespace lll::vk {

// Entry points that need no instance.
#define LLL_VK_GLOBAL_FNS(X)                   \
    X(vkCreateInstance)                        \
    X(vkEnumerateInstanceExtensionProperties)  \
    X(vkEnumerateInstanceLayerProperties)      \
    X(vkEnumerateInstanceVersion)

// Instance-level entry points (the two debug-utils ones are null without VK_EXT_debug_utils).
#define LLL_VK_INSTANCE_FNS(X)                      \
    X(vkDestroyInstance)                            \
    X(vkEnumeratePhysicalDevices)                   \
    X(vkGetPhysicalDeviceProperties)                \
    X(vkGetPhysicalDeviceProperties2)               \
    X(vkGetPhysicalDeviceFeatures2)                 \
    X(vkGetPhysicalDeviceMemoryProperties)          \
    X(vkGetPhysicalDeviceMemoryProperties2)         \
    X(vkGetPhysicalDeviceQueueFamilyProperties)     \
    X(vkEnumerateDeviceExtensionProperties)         \
    X(vkCreateDevice)                               \
    X(vkGetDeviceProcAddr)                          \
    X(vkCreateDebugUtilsMessengerEXT)               \
    X(vkDestroyDebugUtilsMessengerEXT)

// Device-level entry points.
#define LLL_VK_DEVICE_FNS(X)                \
    X(vkDestroyDevice)                      \
    X(vkGetDeviceQueue)                     \
    X(vkDeviceWaitIdle)                     \
    X(vkCreateBuffer)                       \
    X(vkDestroyBuffer)                      \
    X(vkGetBufferMemoryRequirements)        \
    X(vkAllocateMemory)                     \
    X(vkFreeMemory)                         \
    X(vkBindBufferMemory)                   \
    X(vkMapMemory)                          \
    X(vkUnmapMemory)                        \
    X(vkFlushMappedMemoryRanges)            \
    X(vkInvalidateMappedMemoryRanges)       \
    X(vkCreateShaderModule)                 \
    X(vkDestroyShaderModule)                \
    X(vkCreateDescriptorSetLayout)          \
    X(vkDestroyDescriptorSetLayout)         \
    X(vkCreatePipelineLayout)               \
    X(vkDestroyPipelineLayout)              \
    X(vkCreateComputePipelines)             \
    X(vkDestroyPipeline)                    \
    X(vkCreateDescriptorPool)               \
    X(vkDestroyDescriptorPool)              \
    X(vkResetDescriptorPool)                \
    X(vkAllocateDescriptorSets)             \
    X(vkUpdateDescriptorSets)               \
    X(vkCreateCommandPool)                  \
    X(vkDestroyCommandPool)                 \
    X(vkAllocateCommandBuffers)             \
    X(vkResetCommandBuffer)                 \
    X(vkBeginCommandBuffer)                 \
    X(vkEndCommandBuffer)                   \
    X(vkCmdBindPipeline)                    \
    X(vkCmdBindDescriptorSets)              \
    X(vkCmdPushConstants)                   \
    X(vkCmdDispatch)                        \
    X(vkCmdPipelineBarrier)                 \
    X(vkCmdCopyBuffer)                      \
    X(vkCmdFillBuffer)                      \
    X(vkCreateFence)                        \
    X(vkDestroyFence)                       \
    X(vkResetFences)                        \
    X(vkWaitForFences)                      \
    X(vkQueueSubmit)                        \
    X(vkQueueWaitIdle)

#define LLL_VK_DECLARE_FN(name) PFN_##name name = nullptr;

struct InstanceFns {
    LLL_VK_INSTANCE_FNS(LLL_VK_DECLARE_FN)
};
struct DeviceFns {
    LLL_VK_DEVICE_FNS(LLL_VK_DECLARE_FN)
};

// The loader library and its global entry points. Opened once per process; the library is never
// closed (drivers keep threads and atexit handlers that must not outlive their code).
struct Loader {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
    LLL_VK_GLOBAL_FNS(LLL_VK_DECLARE_FN)
    std::string path;   // the library that was opened
};

// The process's loader, or nullptr when none can be opened; *why receives the reason then.
// LOCALLLM_VULKAN_LOADER names another library (tests point it at a missing file to simulate a
// machine without Vulkan).
const Loader* loader(std::string* why);

// Fill the instance / device tables (entries the implementation lacks stay null).
void load_instance_fns(const Loader& l, VkInstance instance, InstanceFns* fns);
void load_device_fns(const InstanceFns& ifns, VkDevice device, DeviceFns* fns);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc., for error messages.
const char* result_name(VkResult r);
// Throws std::runtime_error("<what>: <result name>") unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace lll::vk
