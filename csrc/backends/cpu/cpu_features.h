// cpu_features.h — what this CPU, and the OS's grant of register state, let a process run:
// on x86, CPUID feature bits plus XCR0 (XGETBV), so that an instruction set the CPU has but the OS does
// not save on a context switch (AVX-512 under an old kernel or a hypervisor that hides it) counts
// as absent. Compiled for plain x86-64 wherever it is used: the portable build's probe runs it
// before it knows which variant of the core this CPU can load.
#pragma once

namespace lll {

bool cpu_has_avx2();     // the AVX2 kernel level: AVX2 + FMA + F16C, YMM state granted
bool cpu_has_avx512();   // the AVX-512 kernel level: the AVX2 level + F/BW/VL/DQ/VNNI/VBMI + BMI2, ZMM state granted

// aarch64 (Linux: the kernel's hwcaps, getauxval(AT_HWCAP)); false on every other architecture.
bool cpu_has_neon();      // Advanced SIMD (FEAT_AdvSIMD), with its fp16 <-> f32 conversions
bool cpu_has_dotprod();   // Neon + SDOT/UDOT (FEAT_DotProd, HWCAP_ASIMDDP)
bool cpu_has_i8mm();      // dotprod + SMMLA/UMMLA/USMMLA (FEAT_I8MM, HWCAP2_I8MM)

// The portable build's variants (LOCALLLM_PORTABLE): each is the whole core compiled with one
// -march; these say whether this CPU runs every instruction that -march allows.
bool cpu_runs_x86_64_v2();   // -march=x86-64-v2: SSE3/SSSE3/SSE4.1/SSE4.2, POPCNT, CX16, LAHF
bool cpu_runs_x86_64_v3();   // -march=x86-64-v3: v2 + AVX/AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE, YMM state
bool cpu_runs_x86_64_v4_vnni_vbmi();   // -march=x86-64-v4 -mavx512vnni -mavx512vbmi, ZMM state

}  // namespace lll
