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

// This architecture's levels, lowest first; each includes everything below it.
#if defined(__aarch64__)
constexpr Isa kLevels[] = {Isa::Scalar, Isa::Neon, Isa::Dotprod, Isa::I8mm};
#else
constexpr Isa kLevels[] = {Isa::Scalar, Isa::AVX2, Isa::AVX512};
#endif
constexpr int kNumLevels = sizeof(kLevels) / sizeof(kLevels[0]);

// LOCALLLM_ISA=<level name> caps the kernel level for the whole process, so that tests can run
// the lower paths end to end on a machine that has the higher ones: the position of that level
// in kLevels; -1 for a value that names no level of this architecture (best_isa() reports it).
int isa_cap() {
    static const int cap = [] {
        const char* v = getenv("LOCALLLM_ISA");
        if (!v || !*v) return kNumLevels - 1;
        for (int i = 0; i < kNumLevels; ++i)
            if (strcmp(v, isa_name(kLevels[i])) == 0) return i;
        return -1;
    }();
    return cap;
}

// The position of `isa` in kLevels; -1 for another architecture's level.
int level_rank(Isa isa) {
    for (int i = 0; i < kNumLevels; ++i)
        if (kLevels[i] == isa) return i;
    return -1;
}

bool cpu_runs(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::AVX2: return LLL_BUILD_AVX2 && cpu_has_avx2();
        case Isa::AVX512: return LLL_BUILD_AVX512 && cpu_has_avx512();
        case Isa::Neon: return LLL_BUILD_NEON && cpu_has_neon();
        case Isa::Dotprod: return LLL_BUILD_DOTPROD && cpu_has_dotprod();
        case Isa::I8mm: return LLL_BUILD_I8MM && cpu_has_i8mm();
    }
    return false;
}

}  // namespace

const Isa* isa_levels(int* count) {
    *count = kNumLevels;
    return kLevels;
}

bool isa_available(Isa isa) {
    const int rank = level_rank(isa);
    if (rank < 0 || (isa_cap() >= 0 && rank > isa_cap())) return false;
    // The probe runs once per level; the answer cannot change while the process lives.
    static const bool runs[kIsaLevels] = {cpu_runs(Isa::Scalar), cpu_runs(Isa::AVX2), cpu_runs(Isa::AVX512),
                                          cpu_runs(Isa::Neon), cpu_runs(Isa::Dotprod), cpu_runs(Isa::I8mm)};
    return runs[(int)isa];
}

Isa best_isa() {
    if (isa_cap() < 0) {
        std::string names;
        for (int i = 0; i < kNumLevels; ++i) names += std::string(i ? ", " : "") + isa_name(kLevels[i]);
        throw std::invalid_argument(std::string("LOCALLLM_ISA='") + getenv("LOCALLLM_ISA") +
                                    "' names no kernel level (" + names + ")");
    }
    for (int i = kNumLevels - 1; i > 0; --i)
        if (isa_available(kLevels[i])) return kLevels[i];
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
        case Isa::Neon: return "neon";
        case Isa::Dotprod: return "dotprod";
        case Isa::I8mm: return "i8mm";
    }
    return "unknown";
}

}  // namespace lll
