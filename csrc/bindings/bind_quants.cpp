// bind_quants.cpp — Python bindings of the reference conversions: dequantize, quantize,
// the type registry (type_info, types, ggml_type_name), can_quantize (wrapped with docstrings by python/localllm/quants.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <math.h>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/blocks.h"
#include "backends/cpu/quants/quants.h"

namespace py = pybind11;

namespace {

// Below this many elements per thread, spawning threads costs more than it saves.
constexpr int64_t kMinElemsPerThread = 1 << 16;
constexpr int kMaxThreads = 8;

// Calls fn(first_block, n_blocks) over [0, total_blocks) split into contiguous ranges, one per
// thread. Every block is converted on its own, so the result does not depend on the split.
template <typename Fn>
void parallel_over_blocks(int64_t total_blocks, int64_t block_elems, const Fn& fn) {
    const int64_t total_elems = total_blocks * block_elems;
    const int hw = std::max(1u, std::thread::hardware_concurrency());
    const int64_t by_size = std::max<int64_t>(1, total_elems / kMinElemsPerThread);
    const int n_threads = (int)std::min<int64_t>({(int64_t)hw, (int64_t)kMaxThreads, by_size,
                                                   std::max<int64_t>(1, total_blocks)});
    if (n_threads <= 1) {
        if (total_blocks > 0) fn(0, total_blocks);
        return;
    }
    std::vector<std::thread> workers;
    workers.reserve(n_threads - 1);
    const int64_t per = total_blocks / n_threads;
    const int64_t extra = total_blocks % n_threads;
    int64_t first = 0;
    for (int t = 0; t < n_threads; ++t) {
        const int64_t count = per + (t < extra ? 1 : 0);
        if (t == n_threads - 1) {
            fn(first, count);   // the calling thread takes the last range
        } else {
            workers.emplace_back([&fn, first, count] { fn(first, count); });
        }
        first += count;
    }
    for (std::thread& w : workers) w.join();
}

// Python ints of any size come in as int64 so that a bad id is a ValueError, not a TypeError.
const lll::TypeTraits& traits_or_throw(int64_t type) {
    const lll::TypeTraits* tt =
        (type >= 0 && type <= 0xFFFFFFFFll) ? lll::type_traits((uint32_t)type) : nullptr;
    if (!tt) throw std::invalid_argument("unsupported tensor type id " + std::to_string(type));
    return *tt;
}

py::array_t<float> dequantize_py(const py::array& data, int64_t type, int64_t n_elements) {
    const lll::TypeTraits& tt = traits_or_throw(type);
    if (!data.dtype().is(py::dtype::of<uint8_t>())) {
        throw std::invalid_argument("dequantize: data must be a uint8 array of raw bytes, got dtype " +
                                    std::string(py::str(data.dtype())));
    }
    if (!(data.flags() & py::array::c_style)) {
        throw std::invalid_argument("dequantize: data must be C-contiguous");
    }
    if (n_elements < 0 || n_elements % tt.block_elems != 0) {
        throw std::invalid_argument("dequantize: element count " + std::to_string(n_elements) +
                                    " is not a non-negative multiple of the " + tt.name +
                                    " block size " + std::to_string(tt.block_elems));
    }
    const int64_t n_blocks = n_elements / tt.block_elems;
    const int64_t expected = n_blocks * tt.block_bytes;
    if ((int64_t)data.nbytes() != expected) {
        throw std::invalid_argument("dequantize: " + std::to_string(n_elements) + " " + tt.name +
                                    " elements take " + std::to_string(expected) +
                                    " bytes, data has " + std::to_string(data.nbytes()));
    }
    py::array_t<float> out(n_elements);
    const uint8_t* src = static_cast<const uint8_t*>(data.data());
    float* dst = out.mutable_data();
    const lll::GGMLType gtype = static_cast<lll::GGMLType>(type);
    // Validate once on this thread so errors surface as exceptions, not inside a worker.
    lll::dequantize_row(gtype, src, dst, 0);
    {
        py::gil_scoped_release release;
        parallel_over_blocks(n_blocks, tt.block_elems, [&](int64_t first, int64_t count) {
            lll::dequantize_row(gtype, src + first * tt.block_bytes, dst + first * tt.block_elems,
                                count * tt.block_elems);
        });
    }
    return out;
}

// importance: None, or float32 [row]: every row weighted by it (quantize_row_weighted).
const float* importance_or_null(const py::object& importance, int64_t row) {
    if (importance.is_none()) return nullptr;
    const py::array a = importance.cast<py::array>();
    if (!a.dtype().is(py::dtype::of<float>()) || !(a.flags() & py::array::c_style) || a.ndim() != 1)
        throw std::invalid_argument("quantize: importance must be a C-contiguous 1-D float32 array");
    if (a.shape(0) != row)
        throw std::invalid_argument("quantize: importance has " + std::to_string(a.shape(0)) +
                                    " values, the rows have " + std::to_string(row) + " columns");
    const float* p = static_cast<const float*>(a.data());
    for (int64_t j = 0; j < row; ++j)
        if (!isfinite(p[j]) || p[j] < 0)
            throw std::invalid_argument("quantize: importance[" + std::to_string(j) + "] = " + std::to_string(p[j]) +
                                        " is not a finite non-negative number");
    return p;
}

py::array_t<uint8_t> quantize_py(const py::array& x, int64_t type, const py::object& importance) {
    const lll::TypeTraits& tt = traits_or_throw(type);
    const lll::GGMLType gtype = static_cast<lll::GGMLType>(type);
    if (!lll::can_quantize(gtype) && !tt.quantize_weighted) {
        throw std::invalid_argument(std::string("quantize: cannot quantize f32 to ") + tt.name);
    }
    if (!x.dtype().is(py::dtype::of<float>())) {
        throw std::invalid_argument("quantize: input must be a float32 array, got dtype " +
                                    std::string(py::str(x.dtype())));
    }
    if (!(x.flags() & py::array::c_style)) {
        throw std::invalid_argument("quantize: input must be C-contiguous");
    }
    if (x.ndim() < 1) throw std::invalid_argument("quantize: input must have at least one dimension");
    const int64_t row = x.shape(x.ndim() - 1);
    if (row % tt.block_elems != 0) {
        throw std::invalid_argument("quantize: last dimension " + std::to_string(row) +
                                    " is not a multiple of the " + tt.name + " block size " +
                                    std::to_string(tt.block_elems));
    }
    // Output: same leading dims, the last one in bytes (gguf-py's layout).
    std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
    shape.back() = (py::ssize_t)(row / tt.block_elems * tt.block_bytes);
    py::array_t<uint8_t> out(shape);
    const float* qw = importance_or_null(importance, row);
    const float* src = static_cast<const float*>(x.data());
    uint8_t* dst = out.mutable_data();
    if (!qw) {
        if (!tt.quantize) {   // IQ2_XXS, IQ2_XS: ggml has no quantizer without importances
            throw std::invalid_argument(std::string("quantize: ") + tt.name + " needs an importance matrix (--imatrix)");
        }
        // Rows are multiples of the block and every reference quantizer works block by block,
        // so splitting over blocks gives the same bytes as quantizing row by row.
        const int64_t n_blocks = (int64_t)x.size() / tt.block_elems;
        py::gil_scoped_release release;
        parallel_over_blocks(n_blocks, tt.block_elems, [&](int64_t first, int64_t count) {
            lll::quantize_row_weighted(gtype, src + first * tt.block_elems, dst + first * tt.block_bytes,
                                       count * tt.block_elems, nullptr);
        });
        return out;
    }
    // Weighted: row by row (some types scale by the whole row's mean square).
    const int64_t n_rows = row ? (int64_t)x.size() / row : 0;
    const size_t row_bytes = (size_t)(row / tt.block_elems * tt.block_bytes);
    py::gil_scoped_release release;
    parallel_over_blocks(n_rows, row, [&](int64_t first, int64_t count) {
        for (int64_t r = first; r < first + count; ++r)
            lll::quantize_row_weighted(gtype, src + r * row, dst + r * row_bytes, row, qw);
    });
    return out;
}

// One registry entry (csrc/backends/cpu/quants/type_registry.cpp) as a dict.
py::dict traits_dict(const lll::TypeTraits& tt) {
    py::dict info;
    info["id"] = static_cast<uint32_t>(tt.id);
    info["name"] = tt.name;
    info["block_elems"] = tt.block_elems;
    info["block_bytes"] = tt.block_bytes;
    info["quantized"] = tt.quantized;
    info["vec_dot_type"] = static_cast<uint32_t>(tt.vec_dot_type);
    info["can_quantize"] = tt.quantize != nullptr;
    info["importance_aware"] = tt.quantize_weighted != nullptr;
    info["needs_importance"] = tt.needs_importance;
    py::list levels;   // ISA levels with a kernel set written (and compiled in) for this type
    for (int level = 0; level < lll::kIsaLevels; ++level)
        if (tt.kernels[level]) levels.append(lll::isa_name(static_cast<lll::Isa>(level)));
    info["kernels"] = levels;
    info["repackable"] = tt.repackable();
    return info;
}

py::dict type_info_py(int64_t type) { return traits_dict(traits_or_throw(type)); }

py::list types_py() {
    int n = 0;
    const lll::TypeTraits* const* list = lll::supported_types(&n);
    py::list out;
    for (int i = 0; i < n; ++i) out.append(traits_dict(*list[i]));
    return out;
}

}  // namespace

void register_quants(py::module_& m) {
    m.def("dequantize", &dequantize_py, py::arg("data"), py::arg("type"), py::arg("n_elements"),
          "Raw blocks (C-contiguous uint8) of a ggml type -> 1-D float32 array of n_elements.");
    m.def("quantize", &quantize_py, py::arg("x"), py::arg("type"), py::arg("importance") = py::none(),
          "float32 array (last dim a multiple of the block size) -> uint8 blocks, last dim in bytes. importance: "
          "None, or float32 [last dim]: every row quantized weighted by it, as llama-quantize --imatrix does.");
    m.def("type_info", &type_info_py, py::arg("type"),
          "The type registry's entry of a supported ggml type id: dict(id, name, block_elems, block_bytes, "
          "quantized, vec_dot_type, can_quantize, kernels, repackable).");
    m.def("types", &types_py, "Every supported type's registry entry (as type_info), in id order.");
    m.def("ggml_type_name", [](int64_t type) -> py::object {
              const char* name = type >= 0 && type <= 0xFFFFFFFFll ? lll::ggml_type_name((uint32_t)type) : nullptr;
              return name ? py::object(py::str(name)) : py::object(py::none());
          }, py::arg("type"), "ggml's name of a type id, supported here or not; None for an id ggml does not define.");
    m.def("can_quantize",
          [](int64_t type) {
              return type >= 0 && type <= 0xFFFFFFFFll &&
                     lll::can_quantize(static_cast<lll::GGMLType>((uint32_t)type));
          },
          py::arg("type"), "Whether quantize() supports f32 -> this type id.");
}
