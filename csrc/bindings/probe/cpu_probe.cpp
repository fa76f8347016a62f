// cpu_probe.cpp — localllm._variants._cpu_probe, the portable build's (LOCALLLM_PORTABLE) first
// module: compiled for plain x86-64, it tells the loader (python/localllm/_core_variant.py) which
// variants of the core, each compiled with its own -march, this CPU and OS run, before any of
// them is loaded (loading one that uses an instruction the CPU lacks would die on SIGILL).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"

PYBIND11_MODULE(_cpu_probe, m) {
    m.def("runnable_variants", [] {
        std::vector<std::string> out;
        if (lll::cpu_runs_x86_64_v2()) out.push_back("baseline");
        if (lll::cpu_runs_x86_64_v3()) out.push_back("avx2");
        if (lll::cpu_runs_x86_64_v4_vnni_vbmi()) out.push_back("avx512");
        return out;
    }, "The portable build's variants this CPU runs, slowest first: baseline (x86-64-v2), "
       "avx2 (x86-64-v3), avx512 (x86-64-v4 + VNNI + VBMI).");
}
