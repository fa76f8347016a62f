// common.cuh — what every .cu file of the C API shares: the per-thread error message, turning
// CUDA errors into llc_status, launch checks and warp reductions.
#pragma once
#include "host_device.cuh"
#include <cuda_runtime.h>
#include <stdint.h>
#include <string>
#include "cuda_api.h"

namespace lll {
namespace cuda {

// Records `msg` as this thread's last error and returns `status`.
llc_status fail(llc_status status, const std::string& msg);

// LLC_OK, or the status (and message "what: CUDA's words") of a CUDA error.
llc_status from_cuda(cudaError_t e, const char* what);

// The launch error of the kernel just queued (bad configuration, no device image for this GPU).
inline llc_status launched(const char* kernel) { return from_cuda(cudaGetLastError(), kernel); }

#define LLC_REQUIRE(cond, msg)                                       \
    do {                                                             \
        if (!(cond)) return ::lll::cuda::fail(LLC_INVALID_ARGUMENT, msg); \
    } while (0)

inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

}  // namespace cuda
}  // namespace lll
