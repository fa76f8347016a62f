// bind_vulkan_ops.cpp — the Vulkan op harness (in _harness): each op runs on a Vulkan device on numpy inputs
// (upload, one submission, download), so tests hold it to the CPU reference on the same data.
#ifdef LOCALLLM_HAVE_VULKAN
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cpu/ops.h"
#include "backends/vulkan/bind_diagnostics.h"
#include "backends/vulkan/vk_ops.h"
#include "bindings/self_registered.h"
#include "common/blocks.h"
#include "common/threadpool.h"

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

uint64_t raw_bytes(uint32_t type, uint64_t rows, uint32_t K) {
    const lll::TypeTraits* tt = lll::type_traits(type);
    if (!tt) throw std::invalid_argument("unknown ggml type " + std::to_string(type));
    if (K == 0 || K % tt->block_elems)
        throw std::invalid_argument("K=" + std::to_string(K) + " is not a positive multiple of the " + tt->name +
                                    " block size " + std::to_string(tt->block_elems));
    return rows * (K / tt->block_elems) * tt->block_bytes;
}

void check_blocks(const U8Array& w, uint32_t type, uint64_t rows, uint32_t K, const char* what) {
    const uint64_t want = raw_bytes(type, rows, K);
    if ((uint64_t)w.size() != want)
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(w.size()) + " bytes given, " +
                                    std::to_string(rows) + " rows of " + std::to_string(K) + " need " + std::to_string(want));
}

py::array_t<float> dequantize_py(const U8Array& w, int type, int64_t rows, int64_t K, int device) {
    check_blocks(w, checked_u32(type, "type"), checked_u32(rows, "rows"), checked_u32(K, "K"), "vulkan_dequantize");
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer dw = device_copy(c, "dequantize input", w.data(), w.size());
    Buffer out = c.create_buffer("dequantize output", (uint64_t)rows * K * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_dequantize(c, (uint32_t)type, dw, out, (uint32_t)rows, (uint32_t)K);
    c.submit_and_wait();
    return download_floats(c, out, {(py::ssize_t)rows, (py::ssize_t)K});
}

py::array_t<float> embed_py(const U8Array& table, int type, int64_t rows, int64_t K, const I32Array& ids, int device) {
    check_blocks(table, checked_u32(type, "type"), checked_u32(rows, "rows"), checked_u32(K, "K"), "vulkan_embed");
    for (py::ssize_t i = 0; i < ids.size(); ++i)
        if (ids.data()[i] < 0 || ids.data()[i] >= rows)
            throw std::out_of_range("token id " + std::to_string(ids.data()[i]) + " out of range [0, " + std::to_string(rows) + ")");
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer dt = device_copy(c, "embedding table", table.data(), table.size());
    Buffer di = device_copy(c, "token ids", ids.data(), (uint64_t)ids.size() * 4);
    Buffer out = c.create_buffer("embeddings", (uint64_t)ids.size() * K * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_embed(c, (uint32_t)type, dt, di, out, checked_u32(ids.size(), "T"), (uint32_t)K);
    c.submit_and_wait();
    return download_floats(c, out, {(py::ssize_t)ids.size(), (py::ssize_t)K});
}

py::array_t<float> linear_py(const U8Array& w, int type, int64_t N, int64_t K, const F32Array& x,
                             const std::string& kernel, int device) {
    check_blocks(w, checked_u32(type, "type"), checked_u32(N, "N"), checked_u32(K, "K"), "vulkan_linear");
    if (x.ndim() != 2 || x.shape(1) != K) throw std::invalid_argument("vulkan_linear: x must be [T, K]");
    lll::vk::LinearKernel which = lll::vk::LinearKernel::Auto;
    if (kernel == "matvec") which = lll::vk::LinearKernel::MatVec;
    else if (kernel == "matvec_int8") which = lll::vk::LinearKernel::MatVecInt8;
    else if (kernel == "tiled") which = lll::vk::LinearKernel::Tiled;
    else if (kernel == "tiled_int8") which = lll::vk::LinearKernel::TiledInt8;
    else if (kernel != "auto") throw std::invalid_argument("vulkan_linear: kernel must be auto, matvec, matvec_int8, tiled or tiled_int8");
    const uint32_t T = checked_u32(x.shape(0), "T");
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer dw = device_copy(c, "linear weight", w.data(), w.size());
    Buffer dx = floats_on_device(c, "linear input", x);
    Buffer out = c.create_buffer("linear output", (uint64_t)T * N * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_linear(c, (uint32_t)type, dw, dx, out, T, (uint32_t)N, (uint32_t)K, which);
    c.submit_and_wait();
    return download_floats(c, out, {(py::ssize_t)T, (py::ssize_t)N});
}

py::array_t<float> rms_norm_py(const F32Array& x, py::object w, float eps, int device) {
    if (x.ndim() != 2) throw std::invalid_argument("vulkan_rms_norm: x must be [rows, n]");
    const uint32_t rows = checked_u32(x.shape(0), "rows"), n = checked_u32(x.shape(1), "n");
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer dx = floats_on_device(c, "rms_norm input", x);
    Buffer dw;
    if (!w.is_none()) {
        F32Array wa = w.cast<F32Array>();
        if ((uint64_t)wa.size() != n) throw std::invalid_argument("vulkan_rms_norm: w must have n elements");
        dw = floats_on_device(c, "rms_norm weight", wa);
    }
    Buffer out = c.create_buffer("rms_norm output", (uint64_t)x.size() * 4, MemoryKind::DeviceLocal);
    c.begin();
    lll::vk::op_rms_norm(c, dx, w.is_none() ? nullptr : &dw, out, rows, n, eps);
    c.submit_and_wait();
    return download_floats(c, out, {(py::ssize_t)rows, (py::ssize_t)n});
}

// The CPU's (cos, sin) table (ops.h rope_table), shared by the Vulkan op and the CPU reference.
std::vector<float> rope_cs(const I32Array& positions, int rope_dims, float base) {
    lll::RopeFreqs f;
    f.base = base;
    std::vector<float> cs((size_t)positions.size() * rope_dims);
    lll::rope_table(positions.data(), positions.size(), rope_dims, f, cs.data());
    return cs;
}

void check_rope(const F32Array& x, const I32Array& positions, int rope_dims, const std::string& style) {
    if (x.ndim() != 3 || positions.ndim() != 1 || positions.shape(0) != x.shape(0))
        throw std::invalid_argument("rope: x must be [T, n_heads, head_dim] and positions [T]");
    if (rope_dims <= 0 || rope_dims % 2 || rope_dims > x.shape(2)) throw std::invalid_argument("rope: bad rope_dims");
    if (style != "normal" && style != "neox") throw std::invalid_argument("rope: style must be 'normal' or 'neox'");
}

py::array_t<float> rope_py(const F32Array& x, const I32Array& positions, int rope_dims, float base,
                           const std::string& style, int device) {
    check_rope(x, positions, rope_dims, style);
    const std::vector<float> cs = rope_cs(positions, rope_dims, base);
    std::unique_lock<std::mutex> lock;
    Context& c = context_for(device, lock);
    Buffer dx = floats_on_device(c, "rope x", x);
    Buffer dcs = device_copy(c, "rope table", cs.data(), cs.size() * 4);
    c.begin();
    lll::vk::op_rope(c, dx, dcs, checked_u32(x.shape(0), "T"), checked_u32(x.shape(1), "n_heads"),
                     checked_u32(x.shape(2), "head_dim"), (uint32_t)rope_dims, style == "neox");
    c.submit_and_wait();
    return download_floats(c, dx, {x.shape(0), x.shape(1), x.shape(2)});
}

// The CPU forward's rope on the same table: the reference the Vulkan op is held to.
py::array_t<float> rope_cpu_py(const F32Array& x, const I32Array& positions, int rope_dims, float base,
                               const std::string& style) {
    check_rope(x, positions, rope_dims, style);
    const std::vector<float> cs = rope_cs(positions, rope_dims, base);
    py::array_t<float> out({x.shape(0), x.shape(1), x.shape(2)});
    std::copy(x.data(), x.data() + x.size(), out.mutable_data());
    lll::ThreadPool pool(1);
    lll::rope(pool, out.mutable_data(), x.shape(0), (int)x.shape(1), (int)x.shape(2), rope_dims, cs.data(),
              style == "neox" ? lll::RopeStyle::NeoX : lll::RopeStyle::Normal);
    return out;
}

}  // namespace

void shutdown_vulkan_contexts() {
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    g_contexts.clear();
}

void register_vulkan_ops(py::module_& m) {
    m.attr("vulkan_compiled") = true;
    bind_vulkan_diagnostics(m);   // this module's own instance and validation log
    // Devices and the instance go before the interpreter (and the drivers' own exit handlers).
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
        shutdown_vulkan_contexts();
        lll::vk::shutdown_instance();
    }));
    m.def("vulkan_add", &add_py, py::arg("a"), py::arg("b"), py::arg("device") = -1,
          "a + b on a Vulkan device (b repeats when smaller: a bias over rows). device -1: the default one.");
    m.def("vulkan_scale", &scale_py, py::arg("x"), py::arg("s"), py::arg("device") = -1, "x * s on a Vulkan device.");
    m.def("vulkan_glu", &glu_py, py::arg("gate"), py::arg("up"), py::arg("kind"), py::arg("device") = -1,
          "act(gate) * up on a Vulkan device, act 'silu' or 'gelu' (tanh form, as the CPU's swiglu / geglu).");
    m.def("vulkan_dequantize", &dequantize_py, py::arg("w"), py::arg("type"), py::arg("rows"), py::arg("K"),
          py::arg("device") = -1, "rows x K elements of raw ggml blocks (uint8) -> f32 [rows, K] on a Vulkan device.");
    m.def("vulkan_embed", &embed_py, py::arg("table"), py::arg("type"), py::arg("rows"), py::arg("K"), py::arg("ids"),
          py::arg("device") = -1, "Rows ids of a [rows, K] table of raw ggml blocks -> f32 [len(ids), K].");
    m.def("vulkan_linear", &linear_py, py::arg("w"), py::arg("type"), py::arg("N"), py::arg("K"), py::arg("x"),
          py::arg("kernel") = "auto", py::arg("device") = -1,
          "y[T, N] = x[T, K] . W[N, K]^T with W raw ggml blocks dequantized in the shader; kernel: auto, matvec "
          "(T <= 4), matvec_int8 (T <= 4: x quantized to q8_1, integer dot products) or tiled.");
    m.def("vulkan_rms_norm", &rms_norm_py, py::arg("x"), py::arg("w"), py::arg("eps"), py::arg("device") = -1,
          "Per row of x[rows, n]: x / sqrt(mean(x^2) + eps) * w (w None: no weight).");
    m.def("vulkan_rope", &rope_py, py::arg("x"), py::arg("positions"), py::arg("rope_dims"), py::arg("base"),
          py::arg("style"), py::arg("device") = -1,
          "Rotary embedding of x[T, n_heads, head_dim] (style 'normal' or 'neox') with the CPU's angle table.");
    m.def("rope_cpu", &rope_cpu_py, py::arg("x"), py::arg("positions"), py::arg("rope_dims"), py::arg("base"),
          py::arg("style"), "The CPU forward's rope (ops.h) on a copy of x: the Vulkan op's reference.");
}

const lll::SelfRegisteredBindings kVulkanOps(lll::BindingsModule::Harness, &register_vulkan_ops);
#endif  // LOCALLLM_HAVE_VULKAN
