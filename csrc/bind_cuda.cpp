// bind_cuda.cpp — the CUDA kernels' Python face (present only in builds with LOCALLLM_CUDA).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
namespace py = pybind11;

#ifdef LOCALLLM_HAVE_CUDA
#include "../cuda/cuda_api.h"
void register_cuda(py::module_& m) {
    m.def("cuda_device_count", &lll::cuda::device_count, "CUDA devices visible (0 without a GPU)");
    m.def("cuda_dequantize",
          [](py::array_t<uint8_t, py::array::c_style> data, uint32_t type, int64_t n) {
              const lll::TypeTraits* tt = lll::type_traits(type);
              if (!tt) throw std::invalid_argument("unknown type id " + std::to_string(type));
              if (n % tt->block_elems || (size_t)data.size() != (size_t)(n / tt->block_elems) * tt->block_bytes)
                  throw std::invalid_argument("data size does not match n elements of " + std::string(tt->name));
              py::array_t<float> out(n);
              lll::cuda::dequantize((lll::GGMLType)type, data.data(), out.mutable_data(), n);
              return out;
          },
          py::arg("data"), py::arg("type"), py::arg("n"), "Dequantize on the GPU (checks kernels vs CPU).");
}
#else
void register_cuda(py::module_& m) {
    m.def("cuda_device_count", []() { return 0; }, "CUDA devices visible (this build has no CUDA)");
}
#endif
