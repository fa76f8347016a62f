// module.cpp — the `localllm._core` extension: one module, each area registers its own bindings.
// The kernels' and ops' test entry points live in `localllm._harness` (bindings/harness/).
#include <pybind11/pybind11.h>

#include "bindings/self_registered.h"

namespace py = pybind11;

void register_quants(py::module_& m);     // bind_quants.cpp: dequantize / quantize, the type registry
void register_isa(py::module_& m);        // bind_isa.cpp: kernel levels of this build and CPU
void register_gguf(py::module_& m);       // bind_gguf.cpp: GGUFFile, GGUFError
void register_sampling(py::module_& m);   // bind_sampling.cpp: Sampler
void register_model(py::module_& m);      // bind_model.cpp: Model, KV cache, Footprint
void register_tokenizer(py::module_& m);  // bind_tokenizer.cpp: BPE merges
void register_devices(py::module_& m);    // bind_devices.cpp: the backend registry's devices

PYBIND11_MODULE(_core, m) {
    m.doc() = "localllm native core: GGUF reader, block-quantized kernels, forward pass";
    register_quants(m);
    register_isa(m);
    register_gguf(m);
    register_sampling(m);
    register_model(m);
    register_tokenizer(m);
    register_devices(m);
    lll::register_self_registered(lll::BindingsModule::Core, m);   // each backend's own (backends/*/)
}
