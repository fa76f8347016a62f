// bind_isa.cpp — which CPU kernel levels this build has and this machine runs (what a model's
// `isa` reports, and what benchmarks record beside their numbers).
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "backends/cpu/quants/bseq/bseq.h"
#include "backends/cpu/quants/quants.h"

namespace py = pybind11;
using lll::Isa;

void register_isa(py::module_& m) {
    m.def("amx_available", &lll::bseq::amx_available,
          "AMX tiles usable (CPU, OS permission, not disabled by LOCALLLM_NO_AMX=1): prompt GEMMs use them.");
    m.def("best_isa", [] { return static_cast<int>(lll::best_isa()); },
          "Fastest kernel level compiled in and supported here: 0 scalar, 1 avx2, 2 avx512.");
    m.def("build_target", [] {
#if defined(__AVX512F__) && defined(__AVX512VL__)
        return "avx512";
#elif defined(__AVX2__)
        return "avx2";
#else
        return "baseline";
#endif
    }, "The instruction set the whole module was compiled for (-march). A level capped below it by "
       "LOCALLLM_ISA still runs code compiled for it: AVX2 kernels in an AVX-512 build have 32 vector "
       "registers and EVEX encodings, which an AVX2-only CPU's build lacks.");
    m.def("isa_available", [](int isa) {
        return isa >= 0 && isa <= 2 && lll::isa_available(static_cast<Isa>(isa));
    }, py::arg("isa"), "Whether kernel level `isa` is compiled in and supported by this CPU.");
    m.def("isa_name", [](int isa) {
        if (isa < 0 || isa > 2) throw std::invalid_argument("isa must be 0, 1 or 2");
        return std::string(lll::isa_name(static_cast<Isa>(isa)));
    }, py::arg("isa"));
}
