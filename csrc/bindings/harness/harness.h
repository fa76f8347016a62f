// harness.h — what the `localllm._harness` bindings share: argument checks that turn a bad
// Python argument into ValueError, and the thread pools the kernels run on.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <mutex>

#include "backends/cpu/quants/quants.h"
#include "common/threadpool.h"

namespace lll {
namespace harness {

namespace py = pybind11;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// A pool per thread count, shared by every call from Python; `busy` serializes run() on it
// because the GIL is released while kernels run.
struct SharedPool {
    explicit SharedPool(int n) : pool(n) {}
    ThreadPool pool;
    std::mutex busy;
};
SharedPool& shared_pool(int n_threads);   // n_threads in 1..256

// An ISA level from Python's int (-1: the best, where allow_best); ValueError unless available.
Isa isa_from_int(int isa, bool allow_best);
// The registry entry of a type id; ValueError for an id this runtime does not support.
const TypeTraits& traits_from_int(int type);
// Bytes of one row of n elements of this type; n must be a positive multiple of the block size.
int64_t row_bytes(const TypeTraits& tt, int64_t n);
// `a` as raw block bytes (a uint8 array; anything else is a ValueError naming `what`).
U8Array raw_bytes(const py::array& a, const char* what);

}  // namespace harness
}  // namespace lll
