// register.cpp — the CUDA backend's registry entry (backends/registry.h). Compiled into every
// build: without CUDA (LOCALLLM_HAVE_CUDA unset) the entry says so (compiled = false, no devices)
// and still carries the footprint rule, so the planner can answer for a build that lacks it.
#include <stdexcept>
#include <string>

#include "backends/backend.h"
#include "backends/cuda/footprint_cuda.h"
#include "backends/registry.h"
#if defined(LOCALLLM_HAVE_CUDA)
#include "cuda_api.h"
#endif

namespace lll {

#if defined(LOCALLLM_HAVE_CUDA)
std::unique_ptr<Backend> make_cuda_backend(const BackendConfig& cfg);   // backend_cuda.cpp

namespace {

int device_count() { return llc_device_count(); }

int default_device(bool /*named*/) { return llc_device_count() > 0 ? 0 : -1; }

void mem_info(int device, size_t* free_bytes, size_t* total_bytes) {
    cuda::check(llc_set_device(device));
    cuda::check(llc_mem_info(free_bytes, total_bytes));
}

std::string device_name(int device) {
    char buf[256];
    cuda::check(llc_device_name(device, buf, sizeof buf));
    return std::string(buf);
}

}  // namespace

const BackendInfo& cuda_backend_info() {
    static const BackendInfo info{"CUDA", /*compiled=*/true, /*host=*/false, /*quantized_kv=*/false, &make_cuda_backend, &cuda_footprint,
                                  &device_count, &default_device, &device_name, &mem_info};
    return info;
}
#else
const BackendInfo& cuda_backend_info() {
    static const BackendInfo info{"CUDA", /*compiled=*/false, /*host=*/false, /*quantized_kv=*/false, /*make=*/nullptr, &cuda_footprint,
                                  /*device_count=*/[] { return 0; }, /*default_device=*/[](bool) { return -1; },
                                  /*device_name=*/nullptr, /*mem_info=*/nullptr};
    return info;
}
#endif

}  // namespace lll
