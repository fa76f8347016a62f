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
          "Fastest kernel level compiled in and supported here: 0 scalar, 1 avx2, 2 avx512, 3 neon, 4 dotprod, 5 i8mm.");
    m.def("isa_levels", [] {
        int n = 0;
        const Isa* levels = lll::isa_levels(&n);
        py::list out;
        for (int i = 0; i < n; ++i) out.append(static_cast<int>(levels[i]));
        return out;
    }, "This architecture's kernel levels, lowest (0, scalar) first: [0, 1, 2] on x86-64 (scalar, avx2, "
       "avx512), [0, 3, 4, 5] on aarch64 (scalar, neon, dotprod, i8mm); each includes the ones before it.");
    m.def("build_target", [] {
#if defined(__AVX512F__) && defined(__AVX512VL__)
        return "avx512";
#elif defined(__AVX2__)
        return "avx2";
#elif defined(__aarch64__)
        return "aarch64";   // armv8-a; the Dotprod / I8mm kernels alone are compiled for more
#else
        return "baseline";
#endif
    }, "The instruction set the whole module was compiled for (-march). A level capped below it by "
       "LOCALLLM_ISA still runs code compiled for it: AVX2 kernels in an AVX-512 build have 32 vector "
       "registers and EVEX encodings, which an AVX2-only CPU's build lacks.");
    m.def("isa_available", [](int isa) {
        return isa >= 0 && isa < lll::kIsaLevels && lll::isa_available(static_cast<Isa>(isa));
    }, py::arg("isa"), "Whether kernel level `isa` is compiled in and supported by this CPU.");
    m.def("isa_name", [](int isa) {
        if (isa < 0 || isa >= lll::kIsaLevels) throw std::invalid_argument("isa must be 0 to 5");
        return std::string(lll::isa_name(static_cast<Isa>(isa)));
    }, py::arg("isa"));
}
