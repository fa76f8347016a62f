// host_device.cuh — LLL_HD as nvcc needs it for the csrc/common headers the kernels share
// (blocks.h, fp16.h, rope.h): their inline functions compiled for the host and the device.
// Included before them; on their own those headers are host code (LLL_HD empty).
#pragma once
#define LLL_HD __host__ __device__
