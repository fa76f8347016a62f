// register.cpp — the Vulkan backend's registry entry (backends/registry.h). Compiled into every
// build: without Vulkan (LOCALLLM_HAVE_VULKAN unset) the entry says so (compiled = false, no
// devices) and still carries the footprint rule, so the planner can answer for a build that lacks it.
//
// Devices are numbered as `_core.vulkan_devices()` lists them (`--device vulkan:N`); `--device
// vulkan` and the automatic choice take default_device below.
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

const vk::Instance* instance_or_null() {
    std::string why;
    return vk::Instance::try_get(&why);
}

int device_count() {
    const vk::Instance* inst = instance_or_null();
    return inst ? (int)inst->devices().size() : 0;
}

// The instance's default GPU (discrete before integrated before virtual). Named (--device
// vulkan), a machine with only a CPU implementation runs on it: naming Vulkan is consent to a slow
// device. The automatic choice (-ngl without --device) never takes a CPU implementation, whatever
// LOCALLLM_VULKAN_ALLOW_CPU says (that variable lets the op harness pick one by default).
int default_device(bool named) {
    const vk::Instance* inst = instance_or_null();
    if (!inst) return -1;
    const int d = inst->default_device();
    if (named) {
        if (d >= 0) return d;
        for (const vk::DeviceInfo& info : inst->devices())
            if (info.usable) return info.index;
        return -1;
    }
    return d >= 0 && inst->devices()[d].type != std::string("cpu") ? d : -1;
}

const vk::DeviceInfo& listed_device(int device) {
    const vk::Instance* inst = instance_or_null();
    const int n = inst ? (int)inst->devices().size() : 0;
    if (device < 0 || device >= n)
        throw std::invalid_argument("no Vulkan device vulkan:" + std::to_string(device) + " (" + std::to_string(n) +
                                    " found; `localllm info --devices` lists them)");
    return inst->devices()[device];
}

void mem_info(int device, size_t* free_bytes, size_t* total_bytes) {
    const vk::DeviceInfo& info = listed_device(device);
    *free_bytes = info.free_bytes;
    *total_bytes = info.total_bytes;
}

std::string device_name(int device) { return listed_device(device).name; }

}  // namespace

// The Vulkan device of a placement (backend_vulkan.cpp): a device it lists that can run our kernels.
int vulkan_device_for_placement(Placement p) {
    if (p.device < 0)
        throw std::runtime_error("Vulkan backend: no usable Vulkan device (a CPU implementation such as lavapipe "
                                 "is used only when named: --device vulkan): run with -ngl 0");
    const vk::DeviceInfo& info = listed_device(p.device);
    if (!info.usable)
        throw std::runtime_error("Vulkan device vulkan:" + std::to_string(p.device) + " (" + info.name +
                                 ") cannot run localllm's kernels: " + info.unusable_reason);
    return p.device;
}

const BackendInfo& vulkan_backend_info() {
    static const BackendInfo info{"Vulkan", /*compiled=*/true, /*host=*/false, /*quantized_kv=*/true, &make_vulkan_backend,
                                  &vulkan_footprint, &device_count, &default_device, &device_name, &mem_info};
    return info;
}
#else
const BackendInfo& vulkan_backend_info() {
    static const BackendInfo info{"Vulkan", /*compiled=*/false, /*host=*/false, /*quantized_kv=*/true, /*make=*/nullptr, &vulkan_footprint,
                                  /*device_count=*/[] { return 0; }, /*default_device=*/[](bool) { return -1; },
                                  /*device_name=*/nullptr, /*mem_info=*/nullptr};
    return info;
}
#endif

}  // namespace lll
