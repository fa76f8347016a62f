// dot_avx512.cpp — AVX-512 kernel sets: the plain float types (tile kernels below) and the
// block-sequential sets for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K (bseq.h: matmul runs the
// packed-panel kernels of bseq_avx512.cpp, bseq_decode.cpp and bseq_amx.cpp). Q2_K / Q3_K are in
// dot_avx512_k.cpp. Scalar references: dot_scalar.cpp and bseq_ref.cpp.
//
// Float tiles: each (weight row, activation row) pair sees the same operation sequence whatever
// the tile size, which is what makes matmul batch invariant.
#include "backends/cpu/quants/dot/dot_impl.h"
#include "backends/cpu/quants/bseq/bseq.h"

#if LLL_BUILD_AVX512
#include <immintrin.h>
#include <string.h>

#include <algorithm>

namespace lll {
namespace kern {
// Named, not anonymous: GCC gives templates instantiated on alias templates from an anonymous
// namespace external (weak) linkage, so equally named tiles of two files would be merged.
namespace avx512_impl {

// ---- plain float types -----------------------------------------------------------------------

struct F32Load {
    static constexpr int kSize = 4;
    static __m512 load(const uint8_t* p, int64_t i) { return _mm512_loadu_ps((const float*)p + i); }
    static __m512 load_masked(const uint8_t* p, int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, (const float*)p + i); }
};
struct F16Load {
    static constexpr int kSize = 2;
    static __m512 load(const uint8_t* p, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)((const uint16_t*)p + i)));
    }
    static __m512 load_masked(const uint8_t* p, int64_t i, __mmask16 m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t*)p + i));
    }
};
struct BF16Load {
    static constexpr int kSize = 2;
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
    static __m512 load(const uint8_t* p, int64_t i) { return widen(_mm256_loadu_si256((const __m256i*)((const uint16_t*)p + i))); }
    static __m512 load_masked(const uint8_t* p, int64_t i, __mmask16 m) {
        return widen(_mm256_maskz_loadu_epi16(m, (const uint16_t*)p + i));
    }
};

// One f32 accumulator per (weight row, activation row) pair, 16 elements per step, the ragged
// end masked to zero, then one horizontal sum. A step loads and converts each of the tile's R + C
// rows once for R x C FMAs: the 4 x 6 prompt tile needs 10 loads for 24 FMAs and fits the 32
// registers (24 accumulators, 6 activations, the weight); with 4 x 3 and two accumulators per
// pair, F16 prompts spent as much time moving rows from L2 as multiplying.
template <class L, int R, int C>
struct FloatTile {
    static inline void step(const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int64_t i,
                            __mmask16 m, bool full, __m512 (&acc)[R][C]) {
        __m512 xv[C];
        for (int c = 0; c < C; ++c) xv[c] = full ? L::load(x + c * xs, i) : L::load_masked(x + c * xs, i, m);
        for (int r = 0; r < R; ++r) {
            const __m512 wv = full ? L::load(w + r * ws, i) : L::load_masked(w + r * ws, i, m);
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }

    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        __m512 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            if (i % 32 == 0)
                for (int r = 0; r < R; ++r) prefetch_ahead<32 * L::kSize>(w + r * ws + i * L::kSize);
            step(w, ws, x, xs, i, 0, true, acc);
        }
        if (i < k) step(w, ws, x, xs, i, (__mmask16)((1u << (k - i)) - 1), false, acc);
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
};

template <int R, int C> using F32Tile = FloatTile<F32Load, R, C>;
template <int R, int C> using F16Tile = FloatTile<F16Load, R, C>;
template <int R, int C> using BF16Tile = FloatTile<BF16Load, R, C>;

// Block-sequential types (bseq.h): the 1 x 1 dot and every tile are the reference fold, which
// the panel kernels of bseq_avx512.cpp reproduce bit for bit; matmul uses those.
template <GGMLType T>
float bseq_dot(int64_t n, const void* w, const void* x) { return bseq::dot_ref(T, n, w, x); }

// The registry marks these types repackable: matmul runs them through bseq::matmul_avx512.
template <GGMLType T>
KernelSet make_bseq_set() {
    return make_tile_set<DotTile<&bseq_dot<T>>::template T, 1, 1>(Isa::AVX512);
}

}  // namespace avx512_impl
using namespace avx512_impl;

LLL_DEFINE_KERNEL_SET(avx512_q4_0, make_bseq_set<GGMLType::Q4_0>())
LLL_DEFINE_KERNEL_SET(avx512_q4_1, make_bseq_set<GGMLType::Q4_1>())
LLL_DEFINE_KERNEL_SET(avx512_q5_0, make_bseq_set<GGMLType::Q5_0>())
LLL_DEFINE_KERNEL_SET(avx512_q5_1, make_bseq_set<GGMLType::Q5_1>())
LLL_DEFINE_KERNEL_SET(avx512_q8_0, make_bseq_set<GGMLType::Q8_0>())
LLL_DEFINE_KERNEL_SET(avx512_q4_K, make_bseq_set<GGMLType::Q4_K>())
LLL_DEFINE_KERNEL_SET(avx512_q5_K, make_bseq_set<GGMLType::Q5_K>())
LLL_DEFINE_KERNEL_SET(avx512_q6_K, make_bseq_set<GGMLType::Q6_K>())
// Float tiles: 4 x 6 for prompts (one Zen 4 core, 4096 x 14336 F16 weight, 512 rows: 92-95
// GFLOPS against 79 for the former 4 x 3 with two accumulators per pair; 6 x 4 gave 82-88),
// 4 x 1 for one activation row (four independent FMA chains).
LLL_DEFINE_KERNEL_SET(avx512_f32, (make_tile_set<F32Tile, 4, 6, 4>(Isa::AVX512)))
LLL_DEFINE_KERNEL_SET(avx512_f16, (make_tile_set<F16Tile, 4, 6, 4>(Isa::AVX512)))
LLL_DEFINE_KERNEL_SET(avx512_bf16, (make_tile_set<BF16Tile, 4, 6, 4>(Isa::AVX512)))

}  // namespace kern
}  // namespace lll

#endif
