// dot_avx512.cpp — AVX-512 (VNNI, VBMI) tile kernels for the 32-element block types and the
// plain float types. K-quants are in dot_avx512_k.cpp. Scalar references: dot_scalar.cpp.
//
// Legacy blocks go G at a time (a "step"; G = 4 for the 4/5-bit types, 2 for Q8_0):
//   * one 64-byte load (plus a masked tail load) covers the step's weight blocks; vpermt2b picks
//     the quants so that each vpdpbusd lane sums products of a single block, and vpermw picks the
//     f16 scales so that each lane gets its own block's scale (then vcvtph2ps). Gathers and
//     scalar scale loads were both measured slower than these in-register permutes.
//   * signed x signed products use vpdpbusd (unsigned x signed) on biased weights: the bias
//     times the activation sums is removed by starting the accumulator at -bias * sum(x), an
//     exact integer identity, computed once per activation row of the tile.
//   * the 16 int32 lanes are converted and accumulated with d_w * d_x in one FMA per step.
// Each (weight row, activation row) pair sees the same operation sequence whatever the tile
// size, which is what makes matmul batch invariant.
#include "dot_impl.h"
#include "bseq.h"

#if LLL_BUILD_AVX512
#include <immintrin.h>
#include <string.h>

#include <algorithm>

namespace lll {
namespace kern {
// Named, not anonymous: GCC gives templates instantiated on alias templates from an anonymous
// namespace external (weak) linkage, so equally named tiles of two files would be merged.
namespace avx512_impl {

// ---- loading blocks ---------------------------------------------------------------------------

template <int kBlockBytes, int kOffset, int kRun>
inline __m512i run_index() { return _mm512_load_si512(RunIndex<kBlockBytes, kOffset, kRun>::table.v); }

inline __m512i load_masked(const uint8_t* p, int n) {   // bytes p[0, n), zeros after; n <= 64
    return _mm512_maskz_loadu_epi8(n >= 64 ? ~0ull : ((1ull << n) - 1), p);
}

// Word-permute table: lane i < 16 takes f16 word (i / kLanesPerBlock) * kStride / 2 + kOffset / 2.
template <int kStride, int kOffset, int kLanesPerBlock>
struct WordIndex {
    struct Table { alignas(64) int16_t v[32]; };
    static constexpr Table make() {
        Table t{};
        for (int i = 0; i < 16; ++i) t.v[i] = (int16_t)((i / kLanesPerBlock) * (kStride / 2) + kOffset / 2);
        return t;
    }
    static constexpr Table table = make();
    static constexpr int kMaxWord = (16 / kLanesPerBlock - 1) * (kStride / 2) + kOffset / 2;
};

// The f16 field at kOffset of each block, as floats broadcast to the block's kLanesPerBlock
// lanes; a = bytes [0, 64) of the group, b = bytes [64, 128) (used only when needed).
// kFirstOnly: only the first lane of each block is set, the others are 0.
template <int kStride, int kOffset, int kLanesPerBlock, bool kFirstOnly = false>
inline __m512 f16_lanes(__m512i a, __m512i b) {
    using WI = WordIndex<kStride, kOffset, kLanesPerBlock>;
    static_assert(WI::kMaxWord < 64, "field outside the 128-byte window");
    const __m512i idx = _mm512_load_si512(WI::table.v);
    constexpr __mmask32 first = kLanesPerBlock == 4 ? 0x1111u : 0x0101u;
    __m512i w;
    if constexpr (WI::kMaxWord < 32)
        w = kFirstOnly ? _mm512_maskz_permutexvar_epi16(first, idx, a) : _mm512_permutexvar_epi16(idx, a);
    else
        w = kFirstOnly ? _mm512_maskz_permutex2var_epi16(first, a, idx, b) : _mm512_permutex2var_epi16(a, idx, b);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(w));
}

// ---- per-type step traits --------------------------------------------------------------------
// A step covers G blocks. W / X: weight / activation side of a step; dot(W, X): 16 int32 lanes,
// 16 / G lanes per block holding exact partial sums of that block; W::d, X::d: the blocks' f16
// scales broadcast to the same lanes. Types with a min also give W::m (first lane of each
// block only) and X::s, and the tile adds m_w * s_x.

inline __m512i nibbles_lo(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i nibbles_hi(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }

// Activations of 4 Q8_0 / Q8_1 blocks: lo = first 16 quants of each block, hi = last 16.
template <int kBlockBytes, int kQsOffset>
struct Act4 {
    static constexpr int kGroupBytes = 4 * kBlockBytes;
    __m512i lo, hi;
    __m512 d;
    static Act4 load(const uint8_t* p) {
        const __m512i idx = run_index<kBlockBytes, kQsOffset, 16>();
        const __m512i a = _mm512_loadu_si512(p), b = load_masked(p + 64, kGroupBytes - 64);
        const __m512i a16 = _mm512_loadu_si512(p + 16), b16 = load_masked(p + 80, kGroupBytes - 80);
        return {_mm512_permutex2var_epi8(a, idx, b), _mm512_permutex2var_epi8(a16, idx, b16),
                f16_lanes<kBlockBytes, 0, 4>(a, b)};
    }
    // -bias * (sum of the 4 quants of each lane), the correction for weights stored as q + bias.
    __m512i neg_bias_sum(int bias) const {
        const __m512i k = _mm512_set1_epi8((char)bias);
        const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), k, lo), k, hi);
        return _mm512_sub_epi32(_mm512_setzero_si512(), s);
    }
};

// Weight nibbles of 4 blocks (16 bytes at kQsOffset in each), low and high halves, + scales.
template <int kBlockBytes, int kQsOffset>
struct Nibbles4 {
    __m512i lo, hi;
    __m512 d, m;
    static Nibbles4 load(const uint8_t* p, bool with_min) {
        const __m512i a = _mm512_loadu_si512(p), b = load_masked(p + 64, 4 * kBlockBytes - 64);
        const __m512i q = _mm512_permutex2var_epi8(a, run_index<kBlockBytes, kQsOffset, 16>(), b);
        Nibbles4 n{nibbles_lo(q), nibbles_hi(q), f16_lanes<kBlockBytes, 0, 4>(a, b), _mm512_setzero_ps()};
        if (with_min) n.m = f16_lanes<kBlockBytes, 2, 4, true>(a, b);
        return n;
    }
};

// Masks of the 5th bits of 4 Q5 blocks (qh at kQhOffset): bit 16g + j of lo_bits is bit j of
// block g's qh, bit 16g + j of hi_bits its bit 16 + j (matching Nibbles4's byte layout).
template <int kBlockBytes, int kQhOffset>
inline void q5_high_masks(const uint8_t* p, __mmask64* lo_bits, __mmask64* hi_bits) {
    uint32_t h[4];
    for (int g = 0; g < 4; ++g) memcpy(&h[g], p + g * kBlockBytes + kQhOffset, 4);
    const uint64_t a = h[0] | ((uint64_t)h[1] << 32), b = h[2] | ((uint64_t)h[3] << 32);
    const uint64_t low16 = 0x0000FFFF0000FFFFull;
    *lo_bits = _pext_u64(a, low16) | (_pext_u64(b, low16) << 32);
    *hi_bits = _pext_u64(a, ~low16) | (_pext_u64(b, ~low16) << 32);
}

template <int kW, int kQh, int kQs>
inline Nibbles4<kW, kQs> load_q5(const uint8_t* p, bool with_min) {
    Nibbles4<kW, kQs> n = Nibbles4<kW, kQs>::load(p, with_min);
    __mmask64 lo_bits, hi_bits;
    q5_high_masks<kW, kQh>(p, &lo_bits, &hi_bits);
    const __m512i sixteen = _mm512_set1_epi8(16);
    n.lo = _mm512_mask_add_epi8(n.lo, lo_bits, n.lo, sixteen);
    n.hi = _mm512_mask_add_epi8(n.hi, hi_bits, n.hi, sixteen);
    return n;
}

// Q4_0 / Q5_0 x Q8_0: weights are q + 8 / q + 16.
template <int kW, int kBias>
struct Act4Biased {
    Act4<sizeof(block_q8_0), 2> q;
    __m512i bias;
    static Act4Biased load(const uint8_t* p) {
        Act4Biased x{Act4<sizeof(block_q8_0), 2>::load(p), {}};
        x.bias = x.q.neg_bias_sum(kBias);
        return x;
    }
};

struct Q4_0Step {
    static constexpr int G = 4, kW = sizeof(block_q4_0), kX = sizeof(block_q8_0);
    static constexpr bool kMin = false;
    using W = Nibbles4<kW, 2>;
    using X = Act4Biased<kW, 8>;
    static W load_w(const uint8_t* p) { return W::load(p, false); }
    static X load_x(const uint8_t* p) { return X::load(p); }
    static __m512 xd(const X& x) { return x.q.d; }
    static __m512i dot(const W& w, const X& x) {
        return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(x.bias, w.lo, x.q.lo), w.hi, x.q.hi);
    }
};

struct Q5_0Step {
    static constexpr int G = 4, kW = sizeof(block_q5_0), kX = sizeof(block_q8_0);
    static constexpr bool kMin = false;
    using W = Nibbles4<kW, 6>;
    using X = Act4Biased<kW, 16>;
    static W load_w(const uint8_t* p) { return load_q5<kW, 2, 6>(p, false); }
    static X load_x(const uint8_t* p) { return X::load(p); }
    static __m512 xd(const X& x) { return x.q.d; }
    static __m512i dot(const W& w, const X& x) {
        return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(x.bias, w.lo, x.q.lo), w.hi, x.q.hi);
    }
};

// Q4_1 / Q5_1 x Q8_1: unsigned quants, plus m_w * s_x per block.
struct Act4Sum {
    Act4<sizeof(block_q8_1), 4> q;
    __m512 s;
    static Act4Sum load(const uint8_t* p) {
        const __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 64);
        return {Act4<sizeof(block_q8_1), 4>::load(p), f16_lanes<sizeof(block_q8_1), 2, 4>(a, b)};
    }
};

struct Q4_1Step {
    static constexpr int G = 4, kW = sizeof(block_q4_1), kX = sizeof(block_q8_1);
    static constexpr bool kMin = true;
    using W = Nibbles4<kW, 4>;
    using X = Act4Sum;
    static W load_w(const uint8_t* p) { return W::load(p, true); }
    static X load_x(const uint8_t* p) { return X::load(p); }
    static __m512 xd(const X& x) { return x.q.d; }
    static __m512i dot(const W& w, const X& x) {
        return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.lo, x.q.lo), w.hi, x.q.hi);
    }
};

struct Q5_1Step {
    static constexpr int G = 4, kW = sizeof(block_q5_1), kX = sizeof(block_q8_1);
    static constexpr bool kMin = true;
    using W = Nibbles4<kW, 8>;
    using X = Act4Sum;
    static W load_w(const uint8_t* p) { return load_q5<kW, 4, 8>(p, true); }
    static X load_x(const uint8_t* p) { return X::load(p); }
    static __m512 xd(const X& x) { return x.q.d; }
    static __m512i dot(const W& w, const X& x) {
        return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.lo, x.q.lo), w.hi, x.q.hi);
    }
};

// Q8_0 x Q8_0, 2 blocks a step (block g in 256-bit half g); weights biased by 128 (xor 0x80).
inline __m512i load_q8_pair(const uint8_t* p) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p + 2))),
                              _mm256_loadu_si256((const __m256i*)(p + sizeof(block_q8_0) + 2)), 1);
}

struct Q8_0Step {
    static constexpr int G = 2, kW = sizeof(block_q8_0), kX = sizeof(block_q8_0);
    static constexpr bool kMin = false;
    struct W { __m512i q; __m512 d, m; };
    struct X { __m512i q, bias; __m512 d; };
    static W load_w(const uint8_t* p) {
        const __m512i a = _mm512_loadu_si512(p);
        return {_mm512_xor_si512(load_q8_pair(p), _mm512_set1_epi8((char)0x80)), f16_lanes<kW, 0, 8>(a, a),
                _mm512_setzero_ps()};
    }
    static X load_x(const uint8_t* p) {
        const __m512i a = _mm512_loadu_si512(p), q = load_q8_pair(p);
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), q);
        return {q, _mm512_sub_epi32(_mm512_setzero_si512(), s), f16_lanes<kX, 0, 8>(a, a)};
    }
    static __m512 xd(const X& x) { return x.d; }
    static __m512i dot(const W& w, const X& x) { return _mm512_dpbusd_epi32(x.bias, w.q, x.q); }
};

// ---- the legacy tile -------------------------------------------------------------------------

template <class S, int R, int C>
struct LegacyTile {
    // One step of G blocks at w[r] / x[c].
    static inline void step(const uint8_t* const* w, const uint8_t* const* x, __m512 (&acc)[R][C],
                            __m512 (&accm)[R][C]) {
        typename S::X xv[C];
        for (int c = 0; c < C; ++c) xv[c] = S::load_x(x[c]);
        for (int r = 0; r < R; ++r) {
            const typename S::W wv = S::load_w(w[r]);
            for (int c = 0; c < C; ++c) {
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S::dot(wv, xv[c])),
                                            _mm512_mul_ps(wv.d, S::xd(xv[c])), acc[r][c]);
                if constexpr (S::kMin) accm[r][c] = _mm512_fmadd_ps(wv.m, xv[c].s, accm[r][c]);
            }
        }
    }

    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        const int64_t nb = k / 32;
        __m512 acc[R][C], accm[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = accm[r][c] = _mm512_setzero_ps();
        const uint8_t* wp[R];
        const uint8_t* xp[C];
        for (int r = 0; r < R; ++r) wp[r] = w + r * ws;
        for (int c = 0; c < C; ++c) xp[c] = x + c * xs;
        int64_t b = 0;
        for (; b + S::G <= nb; b += S::G) {
            for (int r = 0; r < R; ++r) prefetch_ahead<S::G * S::kW>(wp[r]);
            step(wp, xp, acc, accm);
            for (int r = 0; r < R; ++r) wp[r] += S::G * S::kW;
            for (int c = 0; c < C; ++c) xp[c] += S::G * S::kX;
        }
        if (b < nb) {   // ragged end: the last blocks, zero-padded to a whole step
            uint8_t wpad[R][S::G * S::kW], xpad[C][S::G * S::kX];
            const uint8_t* wq[R];
            const uint8_t* xq[C];
            for (int r = 0; r < R; ++r) {
                memset(wpad[r], 0, sizeof(wpad[r]));
                memcpy(wpad[r], wp[r], (nb - b) * S::kW);
                wq[r] = wpad[r];
            }
            for (int c = 0; c < C; ++c) {
                memset(xpad[c], 0, sizeof(xpad[c]));
                memcpy(xpad[c], xp[c], (nb - b) * S::kX);
                xq[c] = xpad[c];
            }
            step(wq, xq, acc, accm);
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c)
                y[c * ldy + r] = S::kMin ? _mm512_reduce_add_ps(acc[r][c]) + _mm512_reduce_add_ps(accm[r][c])
                                         : _mm512_reduce_add_ps(acc[r][c]);
    }
};

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

// Two f32 accumulators per pair (even / odd 16-element runs), then one horizontal sum.
template <class L, int R, int C>
struct FloatTile {
    static inline void step(const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int64_t i,
                            __mmask16 m0, __mmask16 m1, bool full, __m512 (&a0)[R][C], __m512 (&a1)[R][C]) {
        __m512 x0[C], x1[C];
        for (int c = 0; c < C; ++c) {
            x0[c] = full ? L::load(x + c * xs, i) : L::load_masked(x + c * xs, i, m0);
            x1[c] = full ? L::load(x + c * xs, i + 16) : L::load_masked(x + c * xs, i + 16, m1);
        }
        for (int r = 0; r < R; ++r) {
            const __m512 w0 = full ? L::load(w + r * ws, i) : L::load_masked(w + r * ws, i, m0);
            const __m512 w1 = full ? L::load(w + r * ws, i + 16) : L::load_masked(w + r * ws, i + 16, m1);
            for (int c = 0; c < C; ++c) {
                a0[r][c] = _mm512_fmadd_ps(w0, x0[c], a0[r][c]);
                a1[r][c] = _mm512_fmadd_ps(w1, x1[c], a1[r][c]);
            }
        }
    }

    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        __m512 a0[R][C], a1[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) a0[r][c] = a1[r][c] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= k; i += 32) {
            for (int r = 0; r < R; ++r) prefetch_ahead<32 * L::kSize>(w + r * ws + i * L::kSize);
            step(w, ws, x, xs, i, 0, 0, true, a0, a1);
        }
        if (i < k) {
            const int64_t rest = k - i;   // 1..31
            const __mmask16 m0 = (__mmask16)(rest >= 16 ? 0xFFFF : (1u << rest) - 1);
            const __mmask16 m1 = (__mmask16)(rest <= 16 ? 0 : (1u << (rest - 16)) - 1);
            step(w, ws, x, xs, i, m0, m1, false, a0, a1);
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) y[c * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r][c], a1[r][c]));
    }
};

template <int R, int C> using Q4_0Tile = LegacyTile<Q4_0Step, R, C>;
template <int R, int C> using Q4_1Tile = LegacyTile<Q4_1Step, R, C>;
template <int R, int C> using Q5_0Tile = LegacyTile<Q5_0Step, R, C>;
template <int R, int C> using Q5_1Tile = LegacyTile<Q5_1Step, R, C>;
template <int R, int C> using Q8_0Tile = LegacyTile<Q8_0Step, R, C>;
template <int R, int C> using F32Tile = FloatTile<F32Load, R, C>;
template <int R, int C> using F16Tile = FloatTile<F16Load, R, C>;
template <int R, int C> using BF16Tile = FloatTile<BF16Load, R, C>;

// Block-sequential types (bseq.h): the 1 x 1 dot and every tile are the reference fold, which
// the panel kernels of bseq_avx512.cpp reproduce bit for bit; matmul uses those.
template <GGMLType T>
float bseq_dot(int64_t n, const void* w, const void* x) { return bseq::dot_ref(T, n, w, x); }

template <GGMLType T>
KernelSet make_bseq_set() {
    KernelSet ks = make_tile_set<DotTile<&bseq_dot<T>>::template T, 1, 1>(Isa::AVX512);
    ks.bseq = true;
    return ks;
}

}  // namespace avx512_impl
using namespace avx512_impl;

const KernelSet* avx512_kernels(GGMLType wtype) {
    // Tile shapes measured on a Sapphire Rapids core (GOP/s with weights in L2).
    static const KernelSet q4_0 = make_bseq_set<GGMLType::Q4_0>(),
                           q4_1 = make_bseq_set<GGMLType::Q4_1>(),
                           q5_0 = make_bseq_set<GGMLType::Q5_0>(),
                           q5_1 = make_bseq_set<GGMLType::Q5_1>(),
                           q8_0 = make_bseq_set<GGMLType::Q8_0>(),
                           q4_k = make_bseq_set<GGMLType::Q4_K>(),
                           q5_k = make_bseq_set<GGMLType::Q5_K>(),
                           q6_k = make_bseq_set<GGMLType::Q6_K>(),
                           f32 = make_tile_set<F32Tile, 4, 3, 2>(Isa::AVX512),
                           f16 = make_tile_set<F16Tile, 4, 3, 2>(Isa::AVX512),
                           bf16 = make_tile_set<BF16Tile, 4, 3, 2>(Isa::AVX512);
    switch (wtype) {
        case GGMLType::Q4_0: return &q4_0;
        case GGMLType::Q4_1: return &q4_1;
        case GGMLType::Q5_0: return &q5_0;
        case GGMLType::Q5_1: return &q5_1;
        case GGMLType::Q8_0: return &q8_0;
        case GGMLType::F32: return &f32;
        case GGMLType::F16: return &f16;
        case GGMLType::BF16: return &bf16;
        case GGMLType::Q4_K: return &q4_k;
        case GGMLType::Q5_K: return &q5_k;
        case GGMLType::Q6_K: return &q6_k;
        default: return avx512_kquant_kernels(wtype);
    }
}

}  // namespace kern
}  // namespace lll

#else   // !LLL_BUILD_AVX512
namespace lll {
namespace kern {
const KernelSet* avx512_kernels(GGMLType) { return nullptr; }
}  // namespace kern
}  // namespace lll
#endif
