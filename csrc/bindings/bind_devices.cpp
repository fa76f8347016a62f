// bind_devices.cpp — the backend registry's Python face (backends/registry.h): which devices this
// build has, `resolve_device(spec)`, `backend_quantized_kv(name)`, and for each device backend `<name>_compiled`,
// `<name>_device_count()` and `<name>_free_memory(device)` (0 where this build or machine has none),
// plus `<name>_device_name(device)` and `<name>_mem_info(device)` where the build has it. Names follow the registry (e.g. cuda_device_count
// for "CUDA"), so a backend added there appears here with no change.
#include <pybind11/pybind11.h>

#include <ctype.h>

#include <stdexcept>
#include <string>

#include "backends/registry.h"

namespace py = pybind11;

namespace {

std::string lower(const char* s) {
    std::string out(s);
    for (char& c : out) c = (char)tolower((unsigned char)c);
    return out;
}

void bind_device_queries(py::module_& m, const lll::BackendInfo& b) {
    const std::string prefix = lower(b.name);
    m.attr((prefix + "_compiled").c_str()) = b.compiled;
    m.def((prefix + "_device_count").c_str(), b.device_count,
          (std::string(b.name) + " devices visible (0 without a device or driver, or without " + b.name +
           " in this build)").c_str());
    m.def((prefix + "_free_memory").c_str(), [b = &b](int device) -> size_t {
        if (!b->compiled) return 0;
        if (device < 0) device = b->default_device(false);
        if (device < 0) return 0;
        size_t free_b = 0, total_b = 0;
        b->mem_info(device, &free_b, &total_b);
        return free_b;
    }, py::arg("device") = -1,
          (std::string("Free bytes of a ") + b.name + " device (-1: the one the automatic choice takes), what "
           "-ngl auto plans against; 0 where there is none").c_str());
    if (b.device_name) m.def((prefix + "_device_name").c_str(), b.device_name, py::arg("device") = 0);
    if (b.mem_info)
        m.def((prefix + "_mem_info").c_str(), [mem_info = b.mem_info](int device) {
            size_t free_b = 0, total_b = 0;
            mem_info(device, &free_b, &total_b);
            return py::make_tuple(free_b, total_b);
        }, py::arg("device") = 0, "(free, total) bytes of a device");
}

// The placement a device name ("cpu", "vulkan", ...) names; invalid_argument listing the names
// this build knows when it names none.
lll::Placement placement_named(const std::string& device) {
    const lll::Placement p = lll::find_placement(device);
    if (p.backend < 0) throw std::invalid_argument("device must be " + lll::backend_names() + ", not '" + device + "'");
    return p;
}

}  // namespace

void register_devices(py::module_& m) {
    m.def("backend_compiled", [](const std::string& device) {
        return lll::backend_compiled(placement_named(device));
    }, py::arg("device"), ("Whether this build has the backend of a device (" + lll::backend_names() + ").").c_str());
    m.def("backend_quantized_kv", [](const std::string& device) {
        return lll::backend_info(placement_named(device)).quantized_kv;
    }, py::arg("device"), "Whether a backend's attention reads a q8_0/q4_0 KV cache (else f16 only).");
    m.def("resolve_device", [](const std::string& spec) {
        const lll::Placement p = lll::resolve_offload(spec);
        return py::make_tuple(std::string(lll::placement_name(p)), (int)p.device);
    }, py::arg("device"),
          ("(backend, device number) that -ngl offloads to for a device string: '' for the automatic choice "
           "(a backend with a device it may choose by itself, CUDA first), else " + lll::backend_names() +
           " with an optional ':N'; the number is -1 where that backend has no device to give.").c_str());
    for (const lll::BackendInfo* b : lll::backend_registry())
        if (!b->host) bind_device_queries(m, *b);
}
