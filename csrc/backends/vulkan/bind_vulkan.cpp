// bind_vulkan.cpp — the Vulkan backend's product bindings in _core: device listing and the
// instance's diagnostics (the op harness is harness/bind_vulkan_ops.cpp, in _harness). Compiled
// into every build; without Vulkan support compiled in, vulkan_devices() lists nothing.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/self_registered.h"
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/bind_diagnostics.h"
#include "backends/vulkan/vk_instance.h"
#endif

namespace py = pybind11;

#ifdef LOCALLLM_HAVE_VULKAN

namespace {

const char* api_string(uint32_t v, char* buf, size_t n) {
    snprintf(buf, n, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
    return buf;
}

py::dict device_dict(const lll::vk::DeviceInfo& d, bool is_default) {
    char api[32];
    py::dict out;
    out["index"] = d.index;
    out["name"] = d.name;
    out["type"] = d.type;
    out["vendor_id"] = d.vendor_id;
    out["device_id"] = d.device_id;
    out["api_version"] = api_string(d.api_version, api, sizeof(api));
    out["driver"] = d.driver;
    out["total_bytes"] = d.total_bytes;
    out["free_bytes"] = d.free_bytes;
    out["memory_budget"] = d.memory_budget;
    out["subgroup_size"] = d.subgroup_size;
    py::dict features;
    features["shaderFloat16"] = d.fp16;
    features["shaderInt8"] = d.int8;
    features["storageBuffer8BitAccess"] = d.storage_8bit;
    features["storageBuffer16BitAccess"] = d.storage_16bit;
    features["subgroup_arithmetic"] = d.subgroup_arithmetic;
    features["VK_KHR_shader_integer_dot_product"] = d.integer_dot_product;
    features["integerDotProduct4x8BitPackedSignedAccelerated"] = d.integer_dot_accelerated;
    features["VK_KHR_cooperative_matrix"] = d.cooperative_matrix;
    out["features"] = features;
    out["max_storage_buffer_range"] = d.max_storage_buffer_range;
    out["usable"] = d.usable;
    out["unusable_reason"] = d.unusable_reason;
    out["default"] = is_default;
    return out;
}

py::list vulkan_devices_py() {
    py::list out;
    lll::vk::Instance* inst = lll::vk::Instance::try_get(nullptr);
    if (!inst) return out;
    const int chosen = inst->default_device();
    for (const auto& d : inst->devices()) out.append(device_dict(d, d.index == chosen));
    return out;
}

}  // namespace
#endif  // LOCALLLM_HAVE_VULKAN

void register_vulkan(py::module_& m) {
#ifdef LOCALLLM_HAVE_VULKAN
    m.attr("vulkan_compiled") = true;
    m.def("vulkan_devices", &vulkan_devices_py,
          "The Vulkan physical devices (de-duplicated) as dicts: index, name, type (discrete, integrated, virtual, "
          "cpu), memory, subgroup size, features, usable, default (the one a plain 'vulkan' placement takes: "
          "never a CPU implementation unless LOCALLLM_VULKAN_ALLOW_CPU=1). Empty without a loader or driver.");
    bind_vulkan_diagnostics(m);
    // The instance goes before the interpreter (and the drivers' own exit handlers).
    py::module_::import("atexit").attr("register")(py::cpp_function([] { lll::vk::shutdown_instance(); }));
#else
    m.attr("vulkan_compiled") = false;
    m.def("vulkan_devices", [] { return py::list(); }, "Empty: this build has no Vulkan backend.");
    m.def("vulkan_unavailable_reason", [] { return std::string("this build has no Vulkan backend"); });
#endif
}

const lll::SelfRegisteredBindings kVulkanBindings(lll::BindingsModule::Core, &register_vulkan);
