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

// The lane sums of 16 vectors, u[i]'s sum in lane 4 * (i % 4) + i / 4, by the tree of
// _mm512_reduce_add_ps (lanes i and i+8, then i and i+4, i and i+2, i and i+1: the same pairs,
// so the same bits), each level's adds shared by several vectors through shuffles. A 4 x 6 tile
// spent a tenth of its time at K = 384 (MiniLM) in 24 separate reductions.
inline __m512 lane_sums16(const __m512 (&u)[16]) {
    __m512 x[8], z[4], r[2];
    for (int k = 0; k < 8; ++k)   // [u_2k: i + (i+8) | u_2k+1: i + (i+8)]
        x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 4; ++k)   // 128-bit quarter q: u_4k+q, j + (j+4)
        z[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int k = 0; k < 2; ++k)   // quarter q: [u_8k+q: 2 | u_8k+q+4: 2], j + (j+2)
        r[k] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(z[2 * k], z[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),   // quarter q:
                         _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));  // u_q, u_q+4, u_q+8, u_q+12
}

// y[c * ldy + r] = the lane sum of acc[r][c], 16 at a time (output o = c * R + r); the slots of
// a last group of fewer repeat acc[0][0], whose duplicate shuffles and adds the compiler drops.
// Both loops must unroll: indexing acc at run time put the accumulators on the stack.
template <int R, int C>
inline void store_lane_sums(const __m512 (&acc)[R][C], float* y, int64_t ldy) {
    constexpr int n = R * C;
#pragma GCC unroll 4
    for (int g = 0; g < n; g += 16) {
        __m512 u[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
            const int o = g + 4 * (i % 4) + i / 4;   // lands in lane o - g
            u[i] = o < n ? acc[o % R][o / R] : acc[0][0];
        }
        alignas(64) float s[16];
        _mm512_store_ps(s, lane_sums16(u));
        for (int o = g; o < n && o < g + 16; ++o) y[(o / R) * ldy + o % R] = s[o - g];
    }
}

// One f32 accumulator per (weight row, activation row) pair, 16 elements per step, the ragged
// end masked to zero, then the lane sums. A step loads and converts each of the tile's R + C
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

    template <bool kRagged>
    static inline void tile(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                            int64_t ldy) {
        __m512 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            if (i % 32 == 0)
                for (int r = 0; r < R; ++r) prefetch_ahead<32 * L::kSize>(w + r * ws + i * L::kSize);
            step(w, ws, x, xs, i, 0, true, acc);
        }
        if constexpr (kRagged) step(w, ws, x, xs, i, (__mmask16)((1u << (k - i)) - 1), false, acc);
        store_lane_sums<R, C>(acc, y, ldy);
    }

    // A ragged K in a function of its own: where the masked step shared one function with the
    // loop, GCC kept the 4 x 6 tile's 24 accumulators on the stack, stored and reloaded around the
    // loop of every tile, whatever K (a fifth of the tile's time at MiniLM's K = 384).
    __attribute__((noinline)) static void run_ragged(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x,
                                                     size_t xs, float* y, int64_t ldy) {
        tile<true>(k, w, ws, x, xs, y, ldy);
    }

    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        if (k % 16 != 0) return run_ragged(k, w, ws, x, xs, y, ldy);
        tile<false>(k, w, ws, x, xs, y, ldy);
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
