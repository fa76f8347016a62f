// isa.cpp — which kernel levels are compiled in and supported by the CPU we run on.
#include "backends/cpu/quants/quants.h"
#include <stdlib.h>
#include <string.h>
#include <stdexcept>
#include <string>
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/quants/dot/dot_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace lll {

namespace {

// LOCALLLM_ISA=scalar|avx2|avx512 caps the kernel level for the whole process, so that tests
// can run the lower paths end to end on a machine that has the higher ones. -1: a value that
// names no level (best_isa() reports it).
int isa_cap() {
    static const int cap = [] {
        const char* v = getenv("LOCALLLM_ISA");
        if (!v || !*v) return (int)Isa::AVX512;
        for (Isa i : {Isa::Scalar, Isa::AVX2, Isa::AVX512})
            if (strcmp(v, isa_name(i)) == 0) return (int)i;
        return -1;
    }();
    return cap;
}

}  // namespace

bool isa_available(Isa isa) {
    if (isa_cap() >= 0 && (int)isa > isa_cap()) return false;
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::AVX2: {
            // The probe runs once; the answer cannot change while the process lives.
            static const bool ok = LLL_BUILD_AVX2 && cpu_has_avx2();
            return ok;
        }
        case Isa::AVX512: {
            static const bool ok = LLL_BUILD_AVX512 && cpu_has_avx512();
            return ok;
        }
    }
    return false;
}

Isa best_isa() {
    if (isa_cap() < 0)
        throw std::invalid_argument(std::string("LOCALLLM_ISA='") + getenv("LOCALLLM_ISA") +
                                    "' names no kernel level (scalar, avx2 or avx512)");
    if (isa_available(Isa::AVX512)) return Isa::AVX512;
    if (isa_available(Isa::AVX2)) return Isa::AVX2;
    return Isa::Scalar;
}

namespace {
bool cpu_is_amd() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return ebx == signature_AMD_ebx && edx == signature_AMD_edx;
#endif
    return false;
}
}  // namespace

// Measured, not derived: on Intel (Sapphire Rapids) prefetching the repacked panels two
// panels ahead into L2 streamed 5-15% more than the hardware prefetchers alone; on AMD Zen 4
// the same prefetches cost Gemma3's decode 12-25% (tg128 97-100 t/s with them, 108-126
// without; Qwen2.5 and SmolLM2 within the noise either way). LOCALLLM_SW_PREFETCH=0|1 overrides.
// This is the one-to-three-row decode kernels' choice; the panel packing of larger batches
// prefetches everywhere (pack_at in quants/bseq_avx512.cpp).
bool replay_prefetch_pays() {
    static const bool pays = [] {
        if (const char* v = getenv("LOCALLLM_SW_PREFETCH"); v && *v) return strcmp(v, "0") != 0;
        return !cpu_is_amd();
    }();
    return pays;
}

// Measured, not derived: Q6_K's prompt kernels at 512 rows, 896 x 4864, one thread, on the
// Sapphire Rapids class VM: 214-231 GOP/s with vpmulld (two uops on Intel), 233-240 with
// ScaleMul's shuffle + vpdpwssd. On Zen 4 the ScaleMul form measured slower for Q6_K.
bool q6k_scale_split_pays() {
    static const bool pays = !cpu_is_amd();
    return pays;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::AVX2: return "avx2";
        case Isa::AVX512: return "avx512";
    }
    return "unknown";
}

}  // namespace lll
