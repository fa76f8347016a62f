// cuda_api.h — host-side entry points of the CUDA kernels (no CUDA headers needed to include).
#pragma once
#include <stdint.h>
#include <string>
#include "blocks.h"

namespace lll {
namespace cuda {

int device_count();                 // 0 when no device or no driver
std::string device_name(int device);
// Dequantize n elements of `type` from host memory on the GPU and copy the floats back:
// the op-by-op check of the CUDA kernels against the CPU reference.
void dequantize(GGMLType type, const void* host_src, float* host_dst, int64_t n);
bool can_dequantize(GGMLType type);

}  // namespace cuda
}  // namespace lll
