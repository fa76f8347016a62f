// dot_impl.h — private interface between the dot-product kernels (dot_*.cpp), the activation
// quantizers (act_quant.cpp), the ISA probe (isa.cpp) and matmul.cpp. Not part of the public API.
//
// A kernel set holds, for one weight type at one ISA level, a family of "tile" kernels: a tile
// computes the R x C dot products between R weight rows and C activation rows. Work shared by a
// tile's rows (unpacking a weight block, loading an activation block) is done once per tile, but
// every (weight row, activation row) pair goes through exactly the same floating-point operations
// whatever R and C are. That is what makes matmul batch invariant: Y[m, n] does not depend on M,
// on m's position in the batch, or on the thread split.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <utility>

#include "common/blocks.h"
#include "backends/cpu/quants/quants.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

// Compiled-in levels. AVX2 means AVX2 + FMA + F16C (no VNNI, so it runs on any AVX2 CPU);
// AVX512 means F/BW/VL/DQ plus VNNI (vpdpbusd / vpdpwssd), VBMI (vpermb / vpermt2b) and BMI2
// (pext); every SIMD path that is compiled is also run, and tested, on this project's machines.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LLL_BUILD_AVX2 1
#else
#define LLL_BUILD_AVX2 0
#endif
#if LLL_BUILD_AVX2 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__AVX512VBMI__) && defined(__BMI2__)
#define LLL_BUILD_AVX512 1
#else
#define LLL_BUILD_AVX512 0
#endif

// aarch64: Neon is part of every armv8-a CPU (always compiled there); the Dotprod and I8mm
// kernels are compiled for armv8.2-a+dotprod(+i8mm) inside their own files only (the target
// pragmas of dot_dotprod.cpp, dot_i8mm.cpp) and run where the CPU reports FEAT_DotProd /
// FEAT_I8MM (isa.cpp), so a plain armv8-a CPU never meets them.
#if defined(__aarch64__) && defined(__ARM_NEON)
#define LLL_BUILD_NEON 1
#define LLL_BUILD_DOTPROD 1
#define LLL_BUILD_I8MM 1
#else
#define LLL_BUILD_NEON 0
#define LLL_BUILD_DOTPROD 0
#define LLL_BUILD_I8MM 0
#endif

#ifndef LLL_PREFETCH_AHEAD
#define LLL_PREFETCH_AHEAD 8192
#endif

namespace lll {
namespace kern {

constexpr int kMaxTile = 6;   // largest R and C of a tile kernel

// Y[c * ldy + r] = dot(weight row r, activation row c) for r < R, c < C. Weight rows are
// w_stride bytes apart, activation rows x_stride bytes apart; k elements per row.
typedef void (*TileFn)(int64_t k, const uint8_t* w, size_t w_stride, const uint8_t* x,
                       size_t x_stride, float* y, int64_t ldy);

// Y[c * ldy + r] = dot(weight row r, activation row c) for r < n, c < m, any n and m: a whole
// matmul unit at once.
typedef void (*UnitFn)(int64_t k, const uint8_t* w, size_t w_stride, int64_t n, const uint8_t* x,
                       size_t x_stride, int64_t m, float* y, int64_t ldy);

struct KernelSet {
    Isa isa;                               // level these kernels are written for
    VecDotFn vec_dot;                      // the 1 x 1 case with the plain VecDotFn signature
    int max_r, max_c;                      // largest tile provided (used for M > 1)
    int decode_r;                          // weight rows per tile when M == 1 (<= max_r)
    TileFn tile[kMaxTile][kMaxTile];       // tile[R-1][C-1]; set for R <= max_r, C <= max_c
    // Optional (null in most sets): a unit kernel that unpacks its weight rows once into a layout
    // no tile can keep in registers and runs every activation row against it, each pair through
    // exactly the float operations of the tiles (so the same bits). It pays only when there are
    // enough activation rows to spread the unpacking over: matmul runs it for units of at least
    // unit_min_rows rows, the tiles for smaller ones.
    UnitFn unit;
    int unit_min_rows;
};

// The kernel sets, one function per (level, weight type), defined in that level's file
// (dot_scalar.cpp, dot_avx2.cpp, dot_avx512.cpp, dot_avx512_k.cpp, dot_neon.cpp, dot_dotprod.cpp,
// dot_i8mm.cpp)
// and referenced only by the type registry's kernels[] (type_registry.cpp). SIMD ones exist only
// where that level is compiled in (LLL_BUILD_AVX2 / _AVX512 / _NEON / _DOTPROD / _I8MM), and on aarch64
// only for the types listed there.
#define LLL_KERNEL_SETS(level)                                                                 \
    const KernelSet* level##_q4_0(); const KernelSet* level##_q4_1();                          \
    const KernelSet* level##_q5_0(); const KernelSet* level##_q5_1();                          \
    const KernelSet* level##_q8_0(); const KernelSet* level##_q2_K();                          \
    const KernelSet* level##_q3_K(); const KernelSet* level##_q4_K();                          \
    const KernelSet* level##_q5_K(); const KernelSet* level##_q6_K();                          \
    const KernelSet* level##_f32(); const KernelSet* level##_f16(); const KernelSet* level##_bf16(); \
    const KernelSet* level##_iq4_nl(); const KernelSet* level##_iq4_xs();                      \
    const KernelSet* level##_iq2_xxs(); const KernelSet* level##_iq2_xs();                      \
    const KernelSet* level##_iq2_s(); const KernelSet* level##_iq3_xxs();                       \
    const KernelSet* level##_iq3_s();
namespace sets {
LLL_KERNEL_SETS(scalar)
LLL_KERNEL_SETS(avx2)
LLL_KERNEL_SETS(avx512)
LLL_KERNEL_SETS(neon)
LLL_KERNEL_SETS(dotprod)
LLL_KERNEL_SETS(i8mm)
}  // namespace sets
#undef LLL_KERNEL_SETS

// Defines a kernel-set function of `sets` returning one static KernelSet built by `expr`.
#define LLL_DEFINE_KERNEL_SET(fn, expr)         \
    const KernelSet* sets::fn() {               \
        static const KernelSet ks = expr;       \
        return &ks;                             \
    }

// Best kernel set at or below `isa` for this weight type (the registry's kernels[], falling back
// level by level); nullptr when the type has no dot product or `isa` is not available here.
const KernelSet* find_kernels(GGMLType wtype, Isa isa);

// Activation quantizers, one per (level, activation type), defined in act_quant.cpp and referenced
// only by the type registry's act_quant[]; n is a multiple of the block size (checked by the
// caller). Each level writes exactly the same bytes as the scalar one. AVX2 / AVX-512 ones exist
// only where that level is compiled in.
namespace act {
void scalar_q8_0(const float* x, void* dst, int64_t n); void scalar_q8_1(const float* x, void* dst, int64_t n);
void scalar_q8_K(const float* x, void* dst, int64_t n); void scalar_f32(const float* x, void* dst, int64_t n);
void scalar_f16(const float* x, void* dst, int64_t n);  void scalar_bf16(const float* x, void* dst, int64_t n);
void avx2_q8_0(const float* x, void* dst, int64_t n);   void avx2_q8_1(const float* x, void* dst, int64_t n);
void avx2_q8_K(const float* x, void* dst, int64_t n);   void avx2_f16(const float* x, void* dst, int64_t n);
void avx512_q8_0(const float* x, void* dst, int64_t n); void avx512_q8_1(const float* x, void* dst, int64_t n);
void avx512_q8_K(const float* x, void* dst, int64_t n); void avx512_f16(const float* x, void* dst, int64_t n);
void avx512_bf16(const float* x, void* dst, int64_t n);
}  // namespace act

// Software prefetch of the weight bytes a tile will read kPrefetchAhead bytes from now, one
// prefetch per 64 bytes of a kBytes step (consecutive steps are contiguous, so every cache line
// gets one). Decode streams weights from DRAM; with the hardware prefetchers alone one core
// streamed Q4_0 / Q4_K weights at ~40% of the rate it reaches with an 8 KiB software prefetch
// distance (measured for 0.5, 1, 2, 4, 8 and 16 KiB).
constexpr int kPrefetchAhead = LLL_PREFETCH_AHEAD;
template <int kBytes>
inline void prefetch_ahead(const uint8_t* p) {
    const char* q = (const char*)p + kPrefetchAhead;
    for (int off = 0; off < kBytes; off += 64) __builtin_prefetch(q + off, 0, 3);
}

// Scale and min of sub-block j (0..7) from the 12 packed 6-bit fields of Q4_K / Q5_K.
inline void k4_scale_min(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// The 16 6-bit scales of a Q3_K block, still biased by +32, one per byte: scale g has its low 4
// bits in the nibbles of bytes 0..7 (g < 8: low nibble of byte g, else high nibble of byte
// g - 8) and its high 2 bits in bytes 8..11 (bits 2 (g / 4) of byte 8 + g % 4).
inline void q3_K_scales_biased(const uint8_t* s, uint8_t* out16) {
    uint32_t a[3], r[4];
    memcpy(a, s, 12);
    const uint32_t low4 = 0x0f0f0f0f, low2 = 0x03030303;
    r[0] = (a[0] & low4) | (((a[2] >> 0) & low2) << 4);
    r[1] = (a[1] & low4) | (((a[2] >> 2) & low2) << 4);
    r[2] = ((a[0] >> 4) & low4) | (((a[2] >> 4) & low2) << 4);
    r[3] = ((a[1] >> 4) & low4) | (((a[2] >> 6) & low2) << 4);
    memcpy(out16, r, 16);
}

#if LLL_BUILD_AVX2
// q3_K_scales_biased in SIMD registers, bias removed: 16 signed scales as int8 in an xmm.
// (Going through memory costs a store-forwarding stall on every super-block.)
inline __m128i q3_K_scales_i8(const uint8_t* s) {
    int a2;
    memcpy(&a2, s + 8, 4);
    const __m128i a = _mm_insert_epi32(_mm_loadl_epi64((const __m128i*)s), a2, 2);   // a0 a1 a2 .
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(a, 0x44), _mm_setr_epi32(0, 0, 4, 4)),
                                      _mm_set1_epi8(0x0F));                                             // a0 a1 a0 a1
    const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(a, 0xAA), _mm_setr_epi32(0, 2, 4, 6)),
                                       _mm_set1_epi8(0x03));                                            // a2 x 4
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi32(high, 4)), _mm_set1_epi8(32));
}
#endif

// The same scales as signed ints (bias removed).
inline void q3_K_scales_unpacked(const uint8_t* s, int* out) {
    uint8_t b[16];
    q3_K_scales_biased(s, b);
    for (int g = 0; g < 16; ++g) out[g] = (int)b[g] - 32;
}

// Builds a tile table whose every tile computes each pair with the 1 x 1 dot product `F`
// (used by levels that have no multi-row kernels for a type).
template <VecDotFn F, int R, int C>
void tile_from_vec_dot(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                       float* y, int64_t ldy) {
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) y[c * ldy + r] = F(k, w + r * ws, x + c * xs);
}

// Fills ks.tile[R-1][C-1] for all R <= MR, C <= MC with Tile<R, C>.
template <template <int, int> class Tile, int MR, int MC>
struct TileTable {
    static_assert(MR >= 1 && MR <= kMaxTile && MC >= 1 && MC <= kMaxTile, "tile shape");
    template <int R, int... Cs>
    static void fill_row(KernelSet& ks, std::integer_sequence<int, Cs...>) {
        ((ks.tile[R - 1][Cs] = &Tile<R, Cs + 1>::run), ...);
    }
    template <int... Rs>
    static void fill_rows(KernelSet& ks, std::integer_sequence<int, Rs...>) {
        (fill_row<Rs + 1>(ks, std::make_integer_sequence<int, MC>{}), ...);
    }
    static void fill(KernelSet& ks) {
        fill_rows(ks, std::make_integer_sequence<int, MR>{});
        ks.max_r = MR;
        ks.max_c = MC;
        ks.decode_r = MR;
    }
};

// Adapts a VecDotFn into a Tile<R, C> class usable with TileTable.
template <VecDotFn F>
struct DotTile {
    template <int R, int C>
    struct T { static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                               float* y, int64_t ldy) { tile_from_vec_dot<F, R, C>(k, w, ws, x, xs, y, ldy); } };
};

// The 1 x 1 tile as a VecDotFn.
template <template <int, int> class Tile>
float tile_vec_dot(int64_t n, const void* w, const void* x) {
    float y;
    Tile<1, 1>::run(n, (const uint8_t*)w, 0, (const uint8_t*)x, 0, &y, 1);
    return y;
}

// Kernel set of a level's Tile<R, C> family, R <= MR, C <= MC; single activation rows use
// DR x 1 tiles (the best shape differs: with one activation row there is nothing to share
// between weight rows, and fewer rows leave more registers).
template <template <int, int> class Tile, int MR, int MC, int DR = MR>
KernelSet make_tile_set(Isa isa) {
    static_assert(DR >= 1 && DR <= MR, "decode tile");
    KernelSet ks{};
    ks.isa = isa;
    ks.vec_dot = &tile_vec_dot<Tile>;
    TileTable<Tile, MR, MC>::fill(ks);
    ks.decode_r = DR;
    return ks;
}

}  // namespace kern
}  // namespace lll
