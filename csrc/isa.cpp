// isa.cpp — which kernel levels are compiled in and supported by the CPU we run on.
#include "quants.h"
#include "quants/dot_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace lll {

// CPUID leaf 1, ECX bit 29. Asked directly: clang (14) does not know "f16c" as a
// __builtin_cpu_supports feature, and the sanitizer build (tests/sanitize.sh) uses clang.
bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
#else
    return false;
#endif
}

namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
    return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("bmi2");
#else
    return false;
#endif
}

}  // namespace

bool isa_available(Isa isa) {
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
    if (isa_available(Isa::AVX512)) return Isa::AVX512;
    if (isa_available(Isa::AVX2)) return Isa::AVX2;
    return Isa::Scalar;
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
