// module.cpp — the `localllm._core` extension: one module, each area registers its own bindings.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_quants(py::module_& m);     // bind_quants.cpp: dequantize / quantize
void register_kernels(py::module_& m);    // bind_kernels.cpp: matmul, vec_dot, ISA levels
void register_gguf(py::module_& m);       // bind_gguf.cpp: GGUFFile, GGUFError
void register_sampling(py::module_& m);   // bind_sampling.cpp: Sampler
void register_model(py::module_& m);      // bind_model.cpp: Model, KV cache
void register_cuda(py::module_& m);       // bind_cuda.cpp: CUDA kernels (when built)
void register_tokenizer(py::module_& m);  // bind_tokenizer.cpp: BPE merges
void register_vulkan(py::module_& m);     // backends/vulkan/bind_vulkan.cpp: devices, op harness

PYBIND11_MODULE(_core, m) {
    m.doc() = "localllm native core: GGUF reader, block-quantized kernels, forward pass";
    register_quants(m);
    register_kernels(m);
    register_gguf(m);
    register_sampling(m);
    register_model(m);
    register_cuda(m);
    register_tokenizer(m);
    register_vulkan(m);
#ifdef LOCALLLM_HAVE_CUDA
    m.attr("cuda_compiled") = true;
#else
    m.attr("cuda_compiled") = false;
#endif
}
