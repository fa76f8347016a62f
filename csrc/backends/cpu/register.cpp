// register.cpp — the CPU backend's registry entry (backends/registry.h): always compiled, the
// host every model runs on (layers not offloaded, sampling, the KV the host reads).
#include "backends/backend.h"
#include "backends/cpu/footprint_cpu.h"
#include "backends/registry.h"

namespace lll {

std::unique_ptr<Backend> make_cpu_backend(const BackendConfig& cfg);   // backend_cpu.cpp

const BackendInfo& cpu_backend_info() {
    static const BackendInfo info{
        "CPU",
        /*compiled=*/true,
        /*host=*/true,
        /*quantized_kv=*/true,
        &make_cpu_backend,
        &cpu_footprint,
        /*device_count=*/nullptr,
        /*default_device=*/nullptr,
        /*device_name=*/nullptr,
        /*mem_info=*/nullptr,
    };
    return info;
}

}  // namespace lll
