// module.cpp — the `localllm._harness` extension: the kernels and ops one entry at a time, for the
// tests that hold them to their references and the benchmarks that time them. Built beside _core
// (CMake option LOCALLLM_HARNESS, on by default; a product wheel leaves it out) from the same
// compiled core, so what it checks is the code _core runs.
#include <pybind11/pybind11.h>

#include "bindings/self_registered.h"

namespace py = pybind11;

void register_matmul_harness(py::module_& m);    // bind_matmul.cpp: quantize_act, vec_dot, matmul*
void register_ops_harness(py::module_& m);       // bind_ops.cpp: rms_norm, GLUs, attention_test
void register_measure_harness(py::module_& m);   // bind_measure.cpp: read bandwidth, pool latency
void register_dispatch_harness(py::module_& m);  // bind_dispatch.cpp: every type through every dispatch

PYBIND11_MODULE(_harness, m) {
    m.doc() = "localllm test and benchmark harness: kernels and layer ops one entry at a time";
    register_matmul_harness(m);
    register_ops_harness(m);
    register_measure_harness(m);
    register_dispatch_harness(m);
    lll::register_self_registered(lll::BindingsModule::Harness, m);   // each backend's ops (backends/*/harness/)
}
