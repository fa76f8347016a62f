// register.cpp — the Vulkan backend's registry entry (backends/registry.h). Compiled into every
// build: without Vulkan (LOCALLLM_HAVE_VULKAN unset) the entry says so (compiled = false, no
// devices) and still carries the footprint rule, so the planner can answer for a build that lacks it.
//
// Which device a "Vulkan" placement runs on: the instance's default GPU (discrete before integrated
// before virtual), never a CPU implementation such as lavapipe unless the user named Vulkan
// (--device vulkan, LLM(device="vulkan")): asking for it by name is consent to a slow device.
#include <stdexcept>
#include <string>

#include "backends/backend.h"
#include "backends/registry.h"
#include "backends/vulkan/footprint_vulkan.h"
#if defined(LOCALLLM_HAVE_VULKAN)
#include "backends/vulkan/vk_instance.h"
#endif

namespace lll {

#if defined(LOCALLLM_HAVE_VULKAN)
std::unique_ptr<Backend> make_vulkan_backend(const BackendConfig& cfg);   // backend_vulkan.cpp
const BackendInfo& vulkan_backend_info();

namespace {

bool named_by_user() { return offload_device_named() == vulkan_backend_info().name; }

// The device index placements use, or -1 (no instance, or no device we may use).
int chosen_device() {
    std::string why;
    const vk::Instance* inst = vk::Instance::try_get(&why);
    if (!inst) return -1;
    const int d = inst->default_device();
    if (named_by_user()) {
        if (d >= 0) return d;
        for (const vk::DeviceInfo& info : inst->devices())
            if (info.usable) return info.index;
        return -1;
    }
    // The automatic choice (-ngl without --device) never offloads to a CPU implementation, whatever
    // LOCALLLM_VULKAN_ALLOW_CPU says (that variable lets the op harness pick one by default).
    return d >= 0 && inst->devices()[d].type != std::string("cpu") ? d : -1;
}

int device_count() { return chosen_device() >= 0 ? 1 : 0; }

void mem_info(size_t* free_bytes, size_t* total_bytes) {
    const int d = chosen_device();
    if (d < 0) throw std::runtime_error("no usable Vulkan device");
    const vk::DeviceInfo& info = vk::Instance::get().devices()[d];
    *free_bytes = info.free_bytes;
    *total_bytes = info.total_bytes;
}

size_t free_memory() {
    if (chosen_device() < 0) return 0;
    size_t free_b = 0, total_b = 0;
    mem_info(&free_b, &total_b);
    return free_b;
}

std::string device_name(int device) {
    const int d = chosen_device();
    if (device != 0 || d < 0) throw std::invalid_argument("no Vulkan device " + std::to_string(device));
    return vk::Instance::get().devices()[d].name;
}

}  // namespace

// The Vulkan device of a placement (backend_vulkan.cpp).
int vulkan_device_for_placement(Placement p) {
    const int d = p.device == 0 ? chosen_device() : -1;
    if (d < 0)
        throw std::runtime_error("Vulkan backend: no usable Vulkan device (a CPU implementation such as lavapipe "
                                 "counts only with LOCALLLM_VULKAN_ALLOW_CPU=1 or --device vulkan): run with -ngl 0");
    return d;
}

const BackendInfo& vulkan_backend_info() {
    static const BackendInfo info{"Vulkan", /*compiled=*/true, /*host=*/false, &make_vulkan_backend,
                                  &vulkan_footprint, &device_count, &free_memory, &device_name, &mem_info};
    return info;
}
#else
const BackendInfo& vulkan_backend_info() {
    static const BackendInfo info{"Vulkan", /*compiled=*/false, /*host=*/false, /*make=*/nullptr, &vulkan_footprint,
                                  /*device_count=*/[] { return 0; }, /*free_memory=*/[] { return (size_t)0; },
                                  /*device_name=*/nullptr, /*mem_info=*/nullptr};
    return info;
}
#endif

}  // namespace lll
