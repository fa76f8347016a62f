// vk_call_counter.cpp — counts and times the Vulkan calls that cost on a CPU implementation
// (submissions, fence and semaphore waits, dispatches, barriers, descriptor updates, buffer and
// memory creation) of any program, without changing it: a library that exports
// vkGetInstanceProcAddr, hands back wrappers for those calls and the real loader's
// (libvulkan.so.1) functions for everything else. At exit it prints one line per call to stderr
// (or appends it to $VK_CALL_COUNTER_OUT): name, count, total milliseconds inside the call.
// VK_CALL_COUNTER_LOG=1 also prints a line per submission (the dispatches and copies recorded
// since the previous one) and per fence wait (milliseconds): for a program that waits on each
// submission before the next, as localllm does, that is each submission's device time.
// vulkan_vs_llamacpp.py's --profile runs both engines under it.
//
//     g++ -O2 -shared -fPIC -std=c++17 benchmarks/vk_call_counter.cpp -o /tmp/vk_call_counter.so -ldl
//     LOCALLLM_VULKAN_LOADER=/tmp/vk_call_counter.so localllm bench ...    # localllm opens it itself
//     LD_PRELOAD=/tmp/vk_call_counter.so llama-bench ...                   # linked programs
#include <dlfcn.h>
#include <vulkan/vulkan.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

enum Call { kSubmit, kSubmit2, kWaitFences, kWaitSemaphores, kGetFenceStatus, kQueueWaitIdle, kDispatch,
            kBarrier, kBarrier2, kUpdateDescriptors, kAllocDescriptors, kCopyBuffer, kCreateBuffer,
            kAllocateMemory, kPushConstants, kCount };
const char* const kNames[kCount] = {
    "vkQueueSubmit", "vkQueueSubmit2", "vkWaitForFences", "vkWaitSemaphores", "vkGetFenceStatus",
    "vkQueueWaitIdle", "vkCmdDispatch", "vkCmdPipelineBarrier", "vkCmdPipelineBarrier2",
    "vkUpdateDescriptorSets", "vkAllocateDescriptorSets", "vkCmdCopyBuffer", "vkCreateBuffer",
    "vkAllocateMemory", "vkCmdPushConstants"};

std::atomic<uint64_t> g_calls[kCount];
std::atomic<uint64_t> g_ns[kCount];
std::atomic<uint64_t> g_since_submit[2];   // dispatches, copies recorded since the last submission
const bool g_log = getenv("VK_CALL_COUNTER_LOG") && *getenv("VK_CALL_COUNTER_LOG") == '1';

struct Timed {   // adds the call's wall time to its counters when it goes out of scope
    Call c;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    explicit Timed(Call call) : c(call) {}
    ~Timed() {
        g_calls[c]++;
        g_ns[c] += (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - t0).count();
    }
};

// Calls `submit`, logging what it submitted and how long the call took (a CPU implementation may
// run part of the work inside it).
template <class F>
VkResult logged_submit(Call c, F submit) {
    const uint64_t dispatches = g_since_submit[0].exchange(0), copies = g_since_submit[1].exchange(0);
    const auto t0 = std::chrono::steady_clock::now();
    VkResult r;
    {
        Timed t(c);
        r = submit();
    }
    if (g_log) fprintf(stderr, "vk_call_counter submit dispatches=%llu copies=%llu ms=%.3f\n",
                       (unsigned long long)dispatches, (unsigned long long)copies,
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return r;
}

void* real_loader() {
    static void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "vk_call_counter: cannot open libvulkan.so.1: %s\n", dlerror());
        abort();
    }
    return lib;
}

PFN_vkGetInstanceProcAddr real_gipa() {
    static auto f = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(real_loader(), "vkGetInstanceProcAddr"));
    return f;
}

// The real function behind each wrapper: one per process (one device in the programs measured).
PFN_vkGetDeviceProcAddr r_gdpa;
PFN_vkQueueSubmit r_submit;
PFN_vkQueueSubmit2 r_submit2;
PFN_vkWaitForFences r_wait_fences;
PFN_vkWaitSemaphores r_wait_semaphores;
PFN_vkGetFenceStatus r_fence_status;
PFN_vkQueueWaitIdle r_queue_wait_idle;
PFN_vkCmdDispatch r_dispatch;
PFN_vkCmdPipelineBarrier r_barrier;
PFN_vkCmdPipelineBarrier2 r_barrier2;
PFN_vkUpdateDescriptorSets r_update_desc;
PFN_vkAllocateDescriptorSets r_alloc_desc;
PFN_vkCmdCopyBuffer r_copy;
PFN_vkCreateBuffer r_create_buffer;
PFN_vkAllocateMemory r_alloc_mem;
PFN_vkCmdPushConstants r_push;

VKAPI_ATTR VkResult VKAPI_CALL w_submit(VkQueue q, uint32_t n, const VkSubmitInfo* s, VkFence f) {
    return logged_submit(kSubmit, [&] { return r_submit(q, n, s, f); });
}
VKAPI_ATTR VkResult VKAPI_CALL w_submit2(VkQueue q, uint32_t n, const VkSubmitInfo2* s, VkFence f) {
    return logged_submit(kSubmit2, [&] { return r_submit2(q, n, s, f); });
}
VKAPI_ATTR VkResult VKAPI_CALL w_wait_fences(VkDevice d, uint32_t n, const VkFence* f, VkBool32 all, uint64_t to) {
    const auto t0 = std::chrono::steady_clock::now();
    VkResult r;
    {
        Timed t(kWaitFences);
        r = r_wait_fences(d, n, f, all, to);
    }
    if (g_log) fprintf(stderr, "vk_call_counter wait ms=%.3f\n",
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return r;
}
VKAPI_ATTR VkResult VKAPI_CALL w_wait_semaphores(VkDevice d, const VkSemaphoreWaitInfo* i, uint64_t to) {
    Timed t(kWaitSemaphores);
    return r_wait_semaphores(d, i, to);
}
VKAPI_ATTR VkResult VKAPI_CALL w_fence_status(VkDevice d, VkFence f) {
    Timed t(kGetFenceStatus);
    return r_fence_status(d, f);
}
VKAPI_ATTR VkResult VKAPI_CALL w_queue_wait_idle(VkQueue q) {
    Timed t(kQueueWaitIdle);
    return r_queue_wait_idle(q);
}
VKAPI_ATTR void VKAPI_CALL w_dispatch(VkCommandBuffer c, uint32_t x, uint32_t y, uint32_t z) {
    g_since_submit[0]++;
    Timed t(kDispatch);
    r_dispatch(c, x, y, z);
}
VKAPI_ATTR void VKAPI_CALL w_barrier(VkCommandBuffer c, VkPipelineStageFlags s, VkPipelineStageFlags d,
                                     VkDependencyFlags f, uint32_t nm, const VkMemoryBarrier* m, uint32_t nb,
                                     const VkBufferMemoryBarrier* b, uint32_t ni, const VkImageMemoryBarrier* i) {
    Timed t(kBarrier);
    r_barrier(c, s, d, f, nm, m, nb, b, ni, i);
}
VKAPI_ATTR void VKAPI_CALL w_barrier2(VkCommandBuffer c, const VkDependencyInfo* i) {
    Timed t(kBarrier2);
    r_barrier2(c, i);
}
VKAPI_ATTR void VKAPI_CALL w_update_desc(VkDevice d, uint32_t nw, const VkWriteDescriptorSet* w, uint32_t nc,
                                         const VkCopyDescriptorSet* c) {
    Timed t(kUpdateDescriptors);
    r_update_desc(d, nw, w, nc, c);
}
VKAPI_ATTR VkResult VKAPI_CALL w_alloc_desc(VkDevice d, const VkDescriptorSetAllocateInfo* i, VkDescriptorSet* s) {
    Timed t(kAllocDescriptors);
    return r_alloc_desc(d, i, s);
}
VKAPI_ATTR void VKAPI_CALL w_copy(VkCommandBuffer c, VkBuffer s, VkBuffer d, uint32_t n, const VkBufferCopy* r) {
    g_since_submit[1]++;
    Timed t(kCopyBuffer);
    r_copy(c, s, d, n, r);
}
VKAPI_ATTR VkResult VKAPI_CALL w_create_buffer(VkDevice d, const VkBufferCreateInfo* i, const VkAllocationCallbacks* a,
                                               VkBuffer* b) {
    Timed t(kCreateBuffer);
    return r_create_buffer(d, i, a, b);
}
VKAPI_ATTR VkResult VKAPI_CALL w_alloc_mem(VkDevice d, const VkMemoryAllocateInfo* i, const VkAllocationCallbacks* a,
                                           VkDeviceMemory* m) {
    Timed t(kAllocateMemory);
    return r_alloc_mem(d, i, a, m);
}
VKAPI_ATTR void VKAPI_CALL w_push(VkCommandBuffer c, VkPipelineLayout l, VkShaderStageFlags s, uint32_t o,
                                  uint32_t n, const void* v) {
    Timed t(kPushConstants);
    r_push(c, l, s, o, n, v);
}

// The wrapper for `name` (storing the real function it calls), or the real function itself.
PFN_vkVoidFunction wrap(const char* name, PFN_vkVoidFunction real);

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL w_gdpa(VkDevice d, const char* name) {
    return wrap(name, r_gdpa(d, name));
}

template <class F>
PFN_vkVoidFunction hook(F* slot, PFN_vkVoidFunction real, F wrapper) {
    *slot = reinterpret_cast<F>(real);
    return reinterpret_cast<PFN_vkVoidFunction>(wrapper);
}

PFN_vkVoidFunction wrap(const char* name, PFN_vkVoidFunction real) {
    if (!real) return real;
#define LLL_HOOK(vkname, slot, wrapper) \
    if (!strcmp(name, vkname)) return hook(&slot, real, wrapper);
    LLL_HOOK("vkGetDeviceProcAddr", r_gdpa, w_gdpa)
    LLL_HOOK("vkQueueSubmit", r_submit, w_submit)
    LLL_HOOK("vkQueueSubmit2", r_submit2, w_submit2)
    LLL_HOOK("vkQueueSubmit2KHR", r_submit2, w_submit2)
    LLL_HOOK("vkWaitForFences", r_wait_fences, w_wait_fences)
    LLL_HOOK("vkWaitSemaphores", r_wait_semaphores, w_wait_semaphores)
    LLL_HOOK("vkWaitSemaphoresKHR", r_wait_semaphores, w_wait_semaphores)
    LLL_HOOK("vkGetFenceStatus", r_fence_status, w_fence_status)
    LLL_HOOK("vkQueueWaitIdle", r_queue_wait_idle, w_queue_wait_idle)
    LLL_HOOK("vkCmdDispatch", r_dispatch, w_dispatch)
    LLL_HOOK("vkCmdPipelineBarrier", r_barrier, w_barrier)
    LLL_HOOK("vkCmdPipelineBarrier2", r_barrier2, w_barrier2)
    LLL_HOOK("vkCmdPipelineBarrier2KHR", r_barrier2, w_barrier2)
    LLL_HOOK("vkUpdateDescriptorSets", r_update_desc, w_update_desc)
    LLL_HOOK("vkAllocateDescriptorSets", r_alloc_desc, w_alloc_desc)
    LLL_HOOK("vkCmdCopyBuffer", r_copy, w_copy)
    LLL_HOOK("vkCreateBuffer", r_create_buffer, w_create_buffer)
    LLL_HOOK("vkAllocateMemory", r_alloc_mem, w_alloc_mem)
    LLL_HOOK("vkCmdPushConstants", r_push, w_push)
#undef LLL_HOOK
    return real;
}

struct Report {
    ~Report() {
        const char* path = getenv("VK_CALL_COUNTER_OUT");
        FILE* out = path && *path ? fopen(path, "a") : stderr;
        if (!out) out = stderr;
        for (int c = 0; c < kCount; ++c)
            if (g_calls[c]) fprintf(out, "vk_call_counter %s %llu %.3f\n", kNames[c],
                                    (unsigned long long)g_calls[c].load(), g_ns[c].load() / 1e6);
        if (out != stderr) fclose(out);
    }
} g_report;

}  // namespace

extern "C" VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance instance, const char* name) {
    if (!strcmp(name, "vkGetInstanceProcAddr")) return reinterpret_cast<PFN_vkVoidFunction>(&vkGetInstanceProcAddr);
    return wrap(name, real_gipa()(instance, name));
}
