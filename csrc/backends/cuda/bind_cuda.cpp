// bind_cuda.cpp — what _core says about CUDA: its error types and the devices a plan can use.
// In a build without CUDA only cuda_device_count and cuda_free_memory exist (both 0), so the
// planner asks the same question of every build.
#include <pybind11/pybind11.h>

#include <stddef.h>

#include <string>

#include "bindings/self_registered.h"
#ifdef LOCALLLM_HAVE_CUDA
#include "cuda_api.h"
#endif

namespace py = pybind11;

namespace {

#ifdef LOCALLLM_HAVE_CUDA
using lll::cuda::check;

void register_cuda(py::module_& m) {
    // Error first: pybind11 tries the translator registered last first, so OutOfMemory wins.
    py::register_exception<lll::cuda::Error>(m, "CudaError", PyExc_RuntimeError);
    py::register_exception<lll::cuda::OutOfMemory>(m, "CudaOutOfMemory", PyExc_MemoryError);
    m.def("cuda_device_count", &llc_device_count, "CUDA devices visible (0 without a GPU or driver)");
    m.def("cuda_device_name", [](int device) {
        char buf[256];
        check(llc_device_name(device, buf, sizeof buf));
        return std::string(buf);
    }, py::arg("device") = 0);
    m.def("cuda_mem_info", [] {
        size_t free_b = 0, total_b = 0;
        check(llc_mem_info(&free_b, &total_b));
        return py::make_tuple(free_b, total_b);
    }, "(free, total) bytes of the current device");
    m.def("cuda_free_memory", [] {
        if (llc_device_count() == 0) return (size_t)0;
        size_t free_b = 0, total_b = 0;
        check(llc_mem_info(&free_b, &total_b));
        return free_b;
    }, "Free bytes of the first GPU, what -ngl auto plans against (0 where there is no device or driver)");
}
#else
void register_cuda(py::module_& m) {
    m.def("cuda_device_count", []() { return 0; }, "CUDA devices visible (this build has no CUDA)");
    m.def("cuda_free_memory", []() { return (size_t)0; }, "Free GPU bytes (this build has no CUDA: 0)");
}
#endif

const lll::SelfRegisteredBindings kCuda(lll::BindingsModule::Core, &register_cuda);

}  // namespace
