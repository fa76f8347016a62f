// bind_cuda.cpp — _core's CUDA error types (builds with CUDA only): a failing CUDA call raises
// CudaError (a RuntimeError), a GPU allocation that does not fit CudaOutOfMemory (a MemoryError).
// The device queries come from the registry entry (register.cpp, bindings/bind_devices.cpp).
#if defined(LOCALLLM_HAVE_CUDA)
#include <pybind11/pybind11.h>

#include "bindings/self_registered.h"
#include "cuda_api.h"

namespace py = pybind11;

namespace {

void register_cuda_errors(py::module_& m) {
    // Error first: pybind11 tries the translator registered last first, so OutOfMemory wins.
    py::register_exception<lll::cuda::Error>(m, "CudaError", PyExc_RuntimeError);
    py::register_exception<lll::cuda::OutOfMemory>(m, "CudaOutOfMemory", PyExc_MemoryError);
}

const lll::SelfRegisteredBindings kCudaErrors(lll::BindingsModule::Core, &register_cuda_errors);

}  // namespace
#endif  // LOCALLLM_HAVE_CUDA
