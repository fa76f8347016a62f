// bind_vulkan_ops.cpp — test harness bindings: each op runs on a Vulkan device on numpy inputs
// (upload, one submission, download), so tests hold it to the CPU reference on the same data.
#ifdef LOCALLLM_HAVE_VULKAN
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/vulkan/vk_ops.h"

namespace py = pybind11;
using lll::vk::Buffer;
using lll::vk::Context;
using lll::vk::MemoryKind;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using U8Array = py::array_t<uint8_t, py::array::c_style>;

std::mutex g_contexts_mu;
std::map<int, std::unique_ptr<Context>> g_contexts;

// The context of device `index` (-1: the default device), created on first use. Every op of
// the harness holds the lock for its whole run: one command buffer per context.
Context& context_for(int index, std::unique_lock<std::mutex>& lock) {
    lock = std::unique_lock<std::mutex>(g_contexts_mu);
    lll::vk::Instance& inst = lll::vk::Instance::get();
    if (index < 0) {
        index = inst.default_device();
        if (index < 0)
            throw std::runtime_error("no Vulkan device to run on (CPU implementations such as lavapipe are used "
                                     "only when named, vulkan:N, or with LOCALLLM_VULKAN_ALLOW_CPU=1)");
    }
    auto& slot = g_contexts[index];
    if (!slot) slot = std::make_unique<Context>(index);
    return *slot;
}

Buffer device_copy(Context& c, const std::string& name, const void* data, uint64_t bytes) {
    Buffer b = c.create_buffer(name, bytes, MemoryKind::DeviceLocal);
    if (bytes) c.upload(b, data, bytes);
    return b;
}

Buffer floats_on_device(Context& c, const std::string& name, const F32Array& a) {
    return device_copy(c, name, a.data(), (uint64_t)a.size() * sizeof(float));
}

py::array_t<float> download_floats(Context& c, const Buffer& b, std::vector<py::ssize_t> shape) {
    py::array_t<float> out(shape);
    c.download(b, out.mutable_data(), (uint64_t)out.size() * sizeof(float));
    return out;
}

uint32_t checked_u32(int64_t v, const char* what) {
    if (v < 0 || v > 0xFFFFFFFFll) throw std::invalid_argument(std::string(what) + " out of range");
    return (uint32_t)v;
}

py::array_t<float> add_py(const F32Array& a, const F32Array& b, int device) {
    if (b.size() == 0 || a.size() % b.size() != 0)
        throw std::invalid_argument("vulkan_add: b's size must divide a's (a bias repeats over rows)");
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer da = floats_on_device(c, "add a", a), db = floats_on_device(c, "add b", b);
    Buffer out = c.create_buffer("add out", (uint64_t)a.size() * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_add(c, da, db, out, checked_u32(a.size(), "n"), checked_u32(b.size(), "b_len"));
    c.submit_and_wait();
    return download_floats(c, out, std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
}

py::array_t<float> scale_py(const F32Array& a, float s, int device) {
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer da = floats_on_device(c, "scale x", a);
    Buffer out = c.create_buffer("scale out", (uint64_t)a.size() * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_scale(c, da, out, checked_u32(a.size(), "n"), s);
    c.submit_and_wait();
    return download_floats(c, out, std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
}

py::array_t<float> glu_py(const F32Array& gate, const F32Array& up, const std::string& kind, int device) {
    if (gate.size() != up.size()) throw std::invalid_argument("vulkan_glu: gate and up differ in size");
    if (kind != "silu" && kind != "gelu") throw std::invalid_argument("vulkan_glu: kind must be 'silu' or 'gelu'");
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer dg = floats_on_device(c, "glu gate", gate), du = floats_on_device(c, "glu up", up);
    Buffer out = c.create_buffer("glu out", (uint64_t)gate.size() * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_glu(c, kind == "silu" ? lll::vk::Glu::SiLU : lll::vk::Glu::GELU, dg, du, out,
                    checked_u32(gate.size(), "n"));
    c.submit_and_wait();
    return download_floats(c, out, std::vector<py::ssize_t>(gate.shape(), gate.shape() + gate.ndim()));
}

}  // namespace

void shutdown_vulkan_contexts() {
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    g_contexts.clear();
}

void register_vulkan_ops(py::module_& m) {
    m.def("vulkan_add", &add_py, py::arg("a"), py::arg("b"), py::arg("device") = -1,
          "a + b on a Vulkan device (b repeats when smaller: a bias over rows). device -1: the default one.");
    m.def("vulkan_scale", &scale_py, py::arg("x"), py::arg("s"), py::arg("device") = -1, "x * s on a Vulkan device.");
    m.def("vulkan_glu", &glu_py, py::arg("gate"), py::arg("up"), py::arg("kind"), py::arg("device") = -1,
          "act(gate) * up on a Vulkan device, act 'silu' or 'gelu' (tanh form, as the CPU's swiglu / geglu).");
}
#endif  // LOCALLLM_HAVE_VULKAN
