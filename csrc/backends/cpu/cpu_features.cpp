// cpu_features.cpp — CPUID and XGETBV, asked directly: the answer must not depend on the
// compiler's runtime (clang 14 does not know "f16c" as a __builtin_cpu_supports feature, and the
// sanitizer build uses clang), and the OS grant (XCR0) is read here rather than assumed.
#include "backends/cpu/cpu_features.h"

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace lll {

#if defined(__x86_64__) || defined(__i386__)

namespace {

struct Cpuid {
    unsigned leaf1_ecx = 0, leaf7_ebx = 0, leaf7_ecx = 0, ext1_ecx = 0;
    uint64_t xcr0 = 0;   // register state the OS saves and restores (0 when XGETBV is not enabled)
};

const Cpuid& cpuid() {
    static const Cpuid c = [] {
        Cpuid r;
        unsigned eax, ebx, ecx, edx;
        if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) r.leaf1_ecx = ecx;
        if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) r.leaf7_ebx = ebx, r.leaf7_ecx = ecx;
        if (__get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx)) r.ext1_ecx = ecx;
        if (r.leaf1_ecx & bit_OSXSAVE) {
            uint32_t lo, hi;
            // The instruction, not the _xgetbv intrinsic: that one needs -mxsave, which the
            // x86-64 baseline this file is compiled for does not have.
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            r.xcr0 = ((uint64_t)hi << 32) | lo;
        }
        return r;
    }();
    return c;
}

constexpr uint64_t kXcr0Ymm = 0x6;    // SSE and AVX (upper YMM) state
constexpr uint64_t kXcr0Zmm = 0xE0;   // opmask, upper ZMM0-15 and ZMM16-31 state

bool all(unsigned reg, unsigned bits) { return (reg & bits) == bits; }

bool os_saves_ymm() { return (cpuid().xcr0 & kXcr0Ymm) == kXcr0Ymm; }
bool os_saves_zmm() { return os_saves_ymm() && (cpuid().xcr0 & kXcr0Zmm) == kXcr0Zmm; }

}  // namespace

bool cpu_has_avx2() {
    return all(cpuid().leaf1_ecx, bit_FMA | bit_F16C | bit_AVX) && all(cpuid().leaf7_ebx, bit_AVX2) && os_saves_ymm();
}

bool cpu_has_avx512() {
    return cpu_has_avx2() && os_saves_zmm() &&
           all(cpuid().leaf7_ebx, bit_AVX512F | bit_AVX512BW | bit_AVX512VL | bit_AVX512DQ | bit_BMI2) &&
           all(cpuid().leaf7_ecx, bit_AVX512VNNI | bit_AVX512VBMI);
}

bool cpu_runs_x86_64_v2() {
    return all(cpuid().leaf1_ecx, bit_SSE3 | bit_SSSE3 | bit_SSE4_1 | bit_SSE4_2 | bit_POPCNT | bit_CMPXCHG16B) &&
           all(cpuid().ext1_ecx, bit_LAHF_LM);
}

bool cpu_runs_x86_64_v3() {
    return cpu_runs_x86_64_v2() && cpu_has_avx2() && all(cpuid().leaf1_ecx, bit_MOVBE | bit_XSAVE) &&
           all(cpuid().leaf7_ebx, bit_BMI | bit_BMI2) && all(cpuid().ext1_ecx, bit_ABM);
}

bool cpu_runs_x86_64_v4_vnni_vbmi() {
    return cpu_runs_x86_64_v3() && cpu_has_avx512() && all(cpuid().leaf7_ebx, bit_AVX512CD);
}

#else

bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
bool cpu_runs_x86_64_v2() { return false; }
bool cpu_runs_x86_64_v3() { return false; }
bool cpu_runs_x86_64_v4_vnni_vbmi() { return false; }

#endif

// The kernel reports what this CPU implements and lets user space run (the same bits /proc/cpuinfo
// shows as "asimd", "asimddp" and "i8mm"); reading the ID registers directly would trap on older kernels.
#if defined(__aarch64__) && defined(__linux__)
bool cpu_has_neon() { return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0; }
bool cpu_has_dotprod() { return cpu_has_neon() && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
bool cpu_has_i8mm() { return cpu_has_dotprod() && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0; }
#else
bool cpu_has_neon() { return false; }
bool cpu_has_dotprod() { return false; }
bool cpu_has_i8mm() { return false; }
#endif

}  // namespace lll
