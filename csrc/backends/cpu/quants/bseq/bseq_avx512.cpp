// bseq_avx512.cpp — block-sequential matmul (bseq.h) with AVX-512 VNNI.
//
// A panel of 16 weight rows is unpacked once into "B layout": per 32-element unit, 8 vectors of
// 16 lanes (one lane per weight row) x 4 consecutive quants as unsigned bytes, plus per-lane
// scales. A kernel then takes each activation row's 4 quants as a broadcast dword, so one
// vpdpbusd adds 4 products to each of the 16 rows' exact integer sums; every lane ends a unit
// holding a whole unit sum, and the float fold of bseq.h runs with rows in lanes. The unpacked
// panel is reused by every activation row of the block (the prompt GEMM), and a decode step
// (one row) does the very same operations, so results are identical for any batch shape.
#include "backends/cpu/quants/bseq/bseq.h"

#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX512
#include <immintrin.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <utility>
#include <stdexcept>
#include <vector>

#include "backends/cpu/quants/bseq/bseq_panel.h"
#include "backends/cpu/quants/bseq/bseq_simd.h"

namespace lll {
namespace bseq {
namespace {
using namespace simd;

// ---- where a packer's 16-row reads come from ------------------------------------------------
// GgufRows: the GGUF blocks of 16 rows (transposes and gathers). RecordRows: the same, also
// appending every value read to a buffer (the repacked weight, written once at load time).
// ReplayRows: reads those values back in the same order: the packer's reads become plain
// contiguous loads, so a repacked panel unpacks several times faster than the GGUF layout.

struct GgufRows {
    const Rows& R;
    void t16(size_t off, __m512i* t) const { transpose_16x16(R.p, off, t); }
    void t32(size_t off, __m512i* t) const { transpose_16x32(R.p, off, t); }
    __m512i gather(size_t off) const { return R.gather(off); }
    __m256i f16_bits(size_t off, bool high) const {
        const __m512i g = R.gather(off);
        return _mm512_cvtepi32_epi16(high ? _mm512_srli_epi32(g, 16) : g);
    }
    __m512 f16(size_t off, bool high) const { return _mm512_cvtph_ps(f16_bits(off, high)); }
    template <int kBytes>
    void prefetch(size_t off) const {
        for (int r = 0; r < kPanel; ++r) kern::prefetch_ahead<kBytes>(R.p[r] + off);
    }
};

struct RecordRows : GgufRows {
    uint8_t** out;
    void put(const void* v, size_t n) const { memcpy(*out, v, n); *out += n; }
    void t16(size_t off, __m512i* t) const { GgufRows::t16(off, t); put(t, 4 * 64); }
    void t32(size_t off, __m512i* t) const { GgufRows::t32(off, t); put(t, 8 * 64); }
    __m512i gather(size_t off) const { const __m512i g = GgufRows::gather(off); put(&g, 64); return g; }
    __m512 f16(size_t off, bool high) const {
        const __m256i h = f16_bits(off, high);
        put(&h, 32);
        return _mm512_cvtph_ps(h);
    }
};

struct ReplayRows {
    const uint8_t** in;
    size_t ahead;              // bytes to the same place in the next panel (prefetched)
    bool sw_prefetch;          // see pack_at and replay_rows
    const uint8_t* take(size_t n) const {
        const uint8_t* p = *in;
        // Two panels ahead, into L2 (hint T2): the L1's 16 fill buffers cannot keep a whole
        // panel's lines in flight from DRAM, the L2's queue can (+5-15% GB/s streamed
        // by the one-row kernels against one panel ahead into L1).
        if (sw_prefetch)
            for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + 2 * ahead + o, 0, 1);
        *in += n;
        return p;
    }
    void t16(size_t, __m512i* t) const { const uint8_t* p = take(256); for (int i = 0; i < 4; ++i) t[i] = _mm512_loadu_si512(p + 64 * i); }
    void t32(size_t, __m512i* t) const { const uint8_t* p = take(512); for (int i = 0; i < 8; ++i) t[i] = _mm512_loadu_si512(p + 64 * i); }
    __m512i gather(size_t) const { return _mm512_loadu_si512(take(64)); }
    __m512 f16(size_t, bool) const { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)take(32))); }
    template <int kBytes>
    void prefetch(size_t) const {}
};

// ---- packers: one function per weight type, filling units [0, nu) of the panel --------------

template <int kBytes, int kQs, int kQh, bool kMin, class S, class Sink>
void pack_legacy4(const S& R, int64_t nu, Sink& P) {   // Q4_0, Q4_1, Q5_0, Q5_1
    const __m512i spread = _mm512_load_si512(kSpread5);
    for (int64_t u = 0; u < nu; ++u) {
        const size_t base = (size_t)u * kBytes;
        if ((u & 3) == 0) R.template prefetch<4 * kBytes>(base);
        __m512i t[4], B[8];
        R.t16(base + kQs, t);
        for (int i = 0; i < 4; ++i) {
            B[i] = lo4(t[i]);
            B[4 + i] = hi4(t[i]);
        }
        if constexpr (kQh >= 0) {
            const __m512i qh = R.gather(base + kQh);
            for (int kg = 0; kg < 8; ++kg) {
                const __m512i nib = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * kg), _mm512_set1_epi32(15));
                B[kg] = _mm512_or_si512(B[kg], _mm512_permutexvar_epi32(nib, spread));
            }
        }
        const __m512 dw = R.f16(base, false);
        P.template legacy<kMin>(u, B, dw, kMin ? R.f16(base, true) : dw);
    }
}

template <class S, class Sink>
void pack_q8_0(const S& R, int64_t nu, Sink& P) {
    constexpr int kBytes = sizeof(block_q8_0);
    for (int64_t u = 0; u < nu; ++u) {
        const size_t base = (size_t)u * kBytes;
        if ((u & 1) == 0) R.template prefetch<2 * kBytes>(base);
        __m512i t[8];
        R.t32(base + 2, t);
        for (int kg = 0; kg < 8; ++kg)   // signed -> unsigned (q + 128); the bias term removes 128 sum x
            t[kg] = _mm512_xor_si512(t[kg], _mm512_set1_epi8((char)0x80));
        const __m512 dw = R.f16(base, false);
        P.template legacy<false>(u, t, dw, dw);
    }
}

template <bool kQ5, class S, class Sink>
void pack_k4(const S& R, int64_t nu, Sink& P) {   // Q4_K, Q5_K
    constexpr int kBytes = kQ5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    constexpr int kQs = kQ5 ? 48 : 16;
    for (int64_t g = 0; g < nu / 8; ++g) {
        const size_t base = (size_t)g * kBytes;
        R.template prefetch<kBytes>(base);
        __m512i h[8];
        if constexpr (kQ5) R.t32(base + 16, h);
        const __m512i a0 = R.gather(base + 4), a1 = R.gather(base + 8), a2 = R.gather(base + 12);
        for (int c = 0; c < 4; ++c) {
            __m512i t[8];
            R.t32(base + kQs + 32 * c, t);
            for (int odd = 0; odd < 2; ++odd) {
                const int j = 2 * c + odd;
                const int64_t u = 8 * g + j;
                __m512i B[8];
                for (int kg = 0; kg < 8; ++kg) {
                    B[kg] = odd ? hi4(t[kg]) : lo4(t[kg]);
                    if constexpr (kQ5) {
                        const __m512i b = j <= 4 ? _mm512_slli_epi32(h[kg], 4 - j) : _mm512_srli_epi32(h[kg], j - 4);
                        B[kg] = _mm512_or_si512(B[kg], _mm512_and_si512(b, _mm512_set1_epi8(0x10)));
                    }
                }
                __m512i sc, mn;
                k4_scales(a0, a1, a2, j, &sc, &mn);
                P.template kunit<false>(u, B, sc, sc, int16_pair(mn, mn));
            }
        }
        const __m512i dm = R.gather(base);
        P.template kgroup<false>(g, f16_low(dm), f16_high(dm));
    }
}

// Unit 4 * half + kQuarter of a Q6_K superblock: low nibbles of l0 / l1 (quarters 0, 1) or
// their high nibbles (2, 3), with bits 2 kQuarter.. of hb as bits 4-5. kQuarter is a template
// argument so every shift is an immediate and nothing is indexed at run time (which made the
// compiler keep l0 / l1 / hb on the stack).
template <int kQuarter, class Sink>
inline void q6_unit(const __m512i* l0, const __m512i* l1, const __m512i* hb, const __m512i* s,
                    int64_t g, int half, Sink& P) {
    const __m512i* src = kQuarter % 2 ? l1 : l0;
    __m512i B[8];
    for (int kg = 0; kg < 8; ++kg) {
        const __m512i lo = kQuarter < 2 ? lo4(src[kg]) : hi4(src[kg]);
        const __m512i hi = kQuarter <= 2 ? _mm512_slli_epi32(hb[kg], 4 - 2 * kQuarter)
                                         : _mm512_srli_epi32(hb[kg], 2 * kQuarter - 4);
        B[kg] = _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi8(0x30), 0xF8);   // lo | (hi & 0x30)
    }
    const int sb = 2 * (4 * half + kQuarter);   // int8 scales of sub-blocks sb, sb + 1, sign-extended
    const __m512i sc0 = q6_scale(s, sb), sc1 = q6_scale(s, sb + 1);
    P.template kunit<true>(8 * g + 4 * half + kQuarter, B, sc0, sc1, int16_pair(sc0, sc1));
}

template <class S, class Sink>
void pack_q6_K(const S& R, int64_t nu, Sink& P) {
    constexpr int kBytes = sizeof(block_q6_K);
    for (int64_t g = 0; g < nu / 8; ++g) {
        const size_t base = (size_t)g * kBytes;
        R.template prefetch<kBytes>(base);
        __m512i s[4];
        for (int i = 0; i < 4; ++i) s[i] = R.gather(base + 192 + 4 * i);
        for (int half = 0; half < 2; ++half) {
            __m512i l0[8], l1[8], hb[8];
            R.t32(base + 64 * half, l0);
            R.t32(base + 64 * half + 32, l1);
            R.t32(base + 128 + 32 * half, hb);
            q6_unit<0>(l0, l1, hb, s, g, half, P);
            q6_unit<1>(l0, l1, hb, s, g, half, P);
            q6_unit<2>(l0, l1, hb, s, g, half, P);
            q6_unit<3>(l0, l1, hb, s, g, half, P);
        }
        const __m512 d = R.f16(base + 206, true);   // d: bytes 208..209
        P.template kgroup<true>(g, d, d);
    }
}

template <class S, class Sink>
void pack_panel(GGMLType t, const S& R, int64_t nu, Sink& P) {
    switch (t) {
        case GGMLType::Q4_0: pack_legacy4<sizeof(block_q4_0), 2, -1, false, S, Sink>(R, nu, P); break;
        case GGMLType::Q4_1: pack_legacy4<sizeof(block_q4_1), 4, -1, true, S, Sink>(R, nu, P); break;
        case GGMLType::Q5_0: pack_legacy4<sizeof(block_q5_0), 6, 2, false, S, Sink>(R, nu, P); break;
        case GGMLType::Q5_1: pack_legacy4<sizeof(block_q5_1), 8, 4, true, S, Sink>(R, nu, P); break;
        case GGMLType::Q8_0: pack_q8_0(R, nu, P); break;
        case GGMLType::Q4_K: pack_k4<false, S, Sink>(R, nu, P); break;
        case GGMLType::Q5_K: pack_k4<true, S, Sink>(R, nu, P); break;
        case GGMLType::Q6_K: pack_q6_K(R, nu, P); break;
        default: throw std::logic_error("bseq::pack_panel: not a block-sequential type (bseq.h kBseqTypes)");
    }
}

// ---- where a packer's unpacked units go ------------------------------------------------------

// PanelSink: into the panel buffer, for the kernels below (many activation rows).
// With `to_signed` (AMX rows follow; Q4_0 / Q5_0 / Q8_0) the quants also go to P.qs minus their
// offset, and only there when no VNNI rows follow (`to_unsigned` false).
struct PanelSink {
    const Panel& P;
    bool to_unsigned = true, to_signed = false;
    __m512i offset = _mm512_setzero_si512();
    template <bool kMin>
    void legacy(int64_t u, const __m512i* B, __m512 dw, __m512 mw) {
        for (int kg = 0; kg < 8; ++kg) {
            if (to_unsigned) _mm512_store_si512(P.q + u * 512 + 64 * kg, B[kg]);
            if (to_signed) _mm512_store_si512(P.qs + u * 512 + 64 * kg, _mm512_sub_epi8(B[kg], offset));
        }
        _mm512_store_ps(P.d + 16 * u, dw);
        if constexpr (kMin) _mm512_store_ps(P.m + 16 * u, mw);
    }
    template <bool kQ6>
    void kunit(int64_t u, const __m512i* B, __m512i sc0, __m512i sc1, __m512i pair) {
        for (int kg = 0; kg < 8; ++kg) _mm512_store_si512(P.q + u * 512 + 64 * kg, B[kg]);
        _mm512_store_si512(P.sc + 32 * u, sc0);
        if constexpr (kQ6) _mm512_store_si512(P.sc + 32 * u + 16, sc1);
        _mm512_store_si512(P.pair + 16 * u, pair);
    }
    template <bool kQ6>
    void kgroup(int64_t g, __m512 dw, __m512 dmin) {
        _mm512_store_ps(P.d + 16 * g, dw);
        if constexpr (!kQ6) _mm512_store_ps(P.m + 16 * g, dmin);
    }
};

// NullSink: discards the units (repacking only records what the packer reads).
struct NullSink {
    template <bool kMin> void legacy(int64_t, const __m512i*, __m512, __m512) {}
    template <bool kQ6> void kunit(int64_t, const __m512i*, __m512i, __m512i, __m512i) {}
    template <bool kQ6> void kgroup(int64_t, __m512, __m512) {}
};

// ---- kernels: C activation rows x one panel, the fold of bseq.h with rows in lanes -----------

// Exact unit sums (4 products per dpbusd per lane) of units u for activation row x.
// Two independent dpbusd chains, added at the end: the sum is exact either way, and a single
// chain of eight 5-cycle dpbusd is what bounded the one-row decode kernels.
// c0 starts at `init` (the unit's -bias term for Q4_0 / Q5_0 / Q8_0: a broadcast load in place of
// a subtraction; the integer is the same).
inline __m512i unit_sum(const __m512i* B, const int8_t* x, int k0, int k1, __m512i init = _mm512_setzero_si512()) {
    __m512i c0 = init, c1 = _mm512_setzero_si512();
    for (int kg = k0; kg < k1; kg += 2) {
        c0 = _mm512_dpbusd_epi32(c0, B[kg], bcast4(x + 4 * kg));
        c1 = _mm512_dpbusd_epi32(c1, B[kg + 1], bcast4(x + 4 * kg + 4));
    }
    return _mm512_add_epi32(c0, c1);
}

inline void load_units(const Panel& P, int64_t u, __m512i* B) {
    for (int kg = 0; kg < 8; ++kg) B[kg] = _mm512_load_si512(P.q + u * 512 + 64 * kg);
}


// is + sc * s for Q4_K / Q5_K without vpmulld, which on Zen 4 holds the vpdpbusd pipes for two
// cycles (Q4_K at 512 rows, 1 thread: 896 x 4864 +13%, 640 x 1024 +20%): the unit sum s (|s| <=
// 32 x 63 x 127 < 2^23) splits into int16 words (s & 0xFF, s >> 8), the scale (a signed byte)
// into (sc, 256 sc), and one vpdpwssd adds sc (s & 0xFF) + 256 sc (s >> 8) = sc s: the same
// exact integer, so the same bits. Q6_K (two 16-element scales per unit) measured slower this
// way on Zen 4 and faster on Intel (q6k_scale_split_pays); the 1-8 row kernels of DotSink, slower.
struct ScaleMul {
    __m512i split, pair;   // vpshufb indexes; they select within 128-bit lanes, 0x80 gives zero
    ScaleMul() {
        const __m512i dword = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C));
        split = _mm512_add_epi32(_mm512_set1_epi32(0x02018000), dword);   // bytes (b0, 0, b1, b2)
        pair = _mm512_add_epi32(_mm512_set1_epi32(0x00800100), dword);    // bytes (c0, c1, 0, c0)
    }
    __m512i scale_pair(__m512i sc) const { return _mm512_shuffle_epi8(sc, pair); }   // sc sign-extended
    __m512i add(__m512i is, __m512i s, __m512i sc_pair) const {
        return _mm512_dpwssd_epi32(is, _mm512_shuffle_epi8(s, split), sc_pair);
    }
};

// DotSink: C activation rows take in each unpacked unit: the fold of bseq.h with weight rows in
// lanes. Fed from a packed panel (many activation rows) or straight from a replayed repacked
// panel (decode: nothing is stored), so both paths run these very operations. The row loops are
// unrolled up to 16 (GCC left C = 16 rolled, its accumulators in memory).
template <int C>
struct DotSink {
    const ActPack& a;
    int64_t m, nu;
    const int8_t* x[C];
    __m512 acc[C];
    __m512i isum[C], aux[C];
    DotSink(const ActPack& a_, int64_t m_, int64_t nu_) : a(a_), m(m_), nu(nu_) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            x[c] = a.q + (m + c) * a.K;
            acc[c] = _mm512_setzero_ps();
            isum[c] = aux[c] = _mm512_setzero_si512();
        }
    }
    template <bool kMin>
    void legacy(int64_t u, const __m512i* B, __m512 dw, __m512 mw) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            const int64_t i = (m + c) * nu + u;
            const __m512i s = unit_sum(B, x[c] + 32 * u, 0, 8, kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(a.nbias[i]));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d[i])), acc[c]);
            if constexpr (kMin) acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[i]), acc[c]);
        }
    }
    template <bool kQ6>
    void kunit(int64_t u, const __m512i* B, __m512i sc0, __m512i sc1, __m512i pair) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            const int8_t* xu = x[c] + 32 * u;
            if constexpr (kQ6) {
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(sc0, unit_sum(B, xu, 0, 4)));
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(sc1, unit_sum(B, xu, 4, 8)));
            } else {
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(sc0, unit_sum(B, xu, 0, 8)));
            }
            aux[c] = _mm512_dpwssd_epi32(aux[c], pair, _mm512_set1_epi32(a.bsum[(m + c) * nu + u]));
        }
    }
    template <bool kQ6>
    void kgroup(int64_t g, __m512 dw, __m512 dmin) {
        const int64_t ng = nu / 8;
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            const __m512 dx = _mm512_set1_ps(a.d[(m + c) * ng + g]);
            if constexpr (kQ6) isum[c] = _mm512_sub_epi32(isum[c], _mm512_slli_epi32(aux[c], 5));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dw, dx), acc[c]);
            if constexpr (!kQ6) acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(aux[c]), neg(_mm512_mul_ps(dmin, dx)), acc[c]);
            isum[c] = aux[c] = _mm512_setzero_si512();
        }
    }
};

template <int C, bool kMin>
void kernel_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, __m512* acc) {
    DotSink<C> sink(a, m, nu);
    for (int64_t u = 0; u < nu; ++u) {
        __m512i B[8];
        load_units(P, u, B);
        sink.template legacy<kMin>(u, B, _mm512_load_ps(P.d + 16 * u), _mm512_load_ps(P.m + 16 * u));
    }
    for (int c = 0; c < C; ++c) acc[c] = sink.acc[c];
}

template <int C, bool kQ6>
void kernel_kquant(const Panel& P, int64_t nu, const ActPack& a, int64_t m, __m512* acc) {
    DotSink<C> sink(a, m, nu);
    for (int64_t g = 0; g < nu / 8; ++g) {
        for (int64_t u = 8 * g; u < 8 * g + 8; ++u) {
            __m512i B[8];
            load_units(P, u, B);
            sink.template kunit<kQ6>(u, B, _mm512_load_si512(P.sc + 32 * u), _mm512_load_si512(P.sc + 32 * u + 16),
                                     _mm512_load_si512(P.pair + 16 * u));
        }
        sink.template kgroup<kQ6>(g, _mm512_load_ps(P.d + 16 * g), _mm512_load_ps(P.m + 16 * g));
    }
    for (int c = 0; c < C; ++c) acc[c] = sink.acc[c];
}

// Two panels (32 weight rows) x C activation rows, legacy types. Each broadcast activation dword
// feeds both panels' dpbusd, and one chain per (row, panel) replaces unit_sum's two (2C chains
// still hide the dpbusd latency): per unit, 0.75 loads and 0.5 fold operations per dpbusd instead
// of 1.25 and 0.63. The integer unit sums are exact and the fold is DotSink::legacy's, operation
// for operation, so every output keeps its bits.
template <int C, bool kMin>
void kernel_legacy_pair(const Panel& P0, const Panel& P1, int64_t nu, const ActPack& a, int64_t m,
                        __m512* acc0, __m512* acc1) {
    const int8_t* x[C];
    for (int c = 0; c < C; ++c) x[c] = a.q + (m + c) * a.K;
    for (int64_t u = 0; u < nu; ++u) {
        __m512i s0[C], s1[C];   // start at the unit's -bias term (unit_sum)
        for (int c = 0; c < C; ++c) s0[c] = s1[c] = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(a.nbias[(m + c) * nu + u]);
        const uint8_t* q0 = P0.q + u * 512;
        const uint8_t* q1 = P1.q + u * 512;
        for (int kg = 0; kg < 8; ++kg) {
            const __m512i b0 = _mm512_load_si512(q0 + 64 * kg), b1 = _mm512_load_si512(q1 + 64 * kg);
            for (int c = 0; c < C; ++c) {
                const __m512i xb = bcast4(x[c] + 32 * u + 4 * kg);
                s0[c] = _mm512_dpbusd_epi32(s0[c], b0, xb);
                s1[c] = _mm512_dpbusd_epi32(s1[c], b1, xb);
            }
        }
        const __m512 dw0 = _mm512_load_ps(P0.d + 16 * u), dw1 = _mm512_load_ps(P1.d + 16 * u);
        for (int c = 0; c < C; ++c) {
            const int64_t i = (m + c) * nu + u;
            const __m512 dx = _mm512_set1_ps(a.d[i]);
            acc0[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[c]), _mm512_mul_ps(dw0, dx), acc0[c]);
            acc1[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[c]), _mm512_mul_ps(dw1, dx), acc1[c]);
            if constexpr (kMin) {
                const __m512 sx = _mm512_set1_ps(a.s[i]);
                acc0[c] = _mm512_fmadd_ps(_mm512_load_ps(P0.m + 16 * u), sx, acc0[c]);
                acc1[c] = _mm512_fmadd_ps(_mm512_load_ps(P1.m + 16 * u), sx, acc1[c]);
            }
        }
    }
}

// One unit of kernel_kquant_pair: the exact unit sums of C rows x two panels, scaled into the
// group sums is0 / is1, by ScaleMul (kSplit) or by vpmulld (Q6_K where q6k_scale_split_pays is
// false; Q6_K has two scales per unit).
template <int C, bool kQ6, bool kSplit>
__attribute__((always_inline)) inline void kquant_unit_pair(const Panel& P0, const Panel& P1, const int8_t* const* x,
                                                            int64_t u, const ScaleMul& mul, __m512i* is0, __m512i* is1) {
    constexpr int kHalves = kQ6 ? 2 : 1;   // Q6_K: a scale per 16 elements, two per unit
    const uint8_t* q0 = P0.q + u * 512;
    const uint8_t* q1 = P1.q + u * 512;
    for (int h = 0; h < kHalves; ++h) {
        __m512i s0[C], s1[C];
        for (int c = 0; c < C; ++c) s0[c] = s1[c] = _mm512_setzero_si512();
        for (int kg = 8 / kHalves * h; kg < 8 / kHalves * (h + 1); ++kg) {
            const __m512i b0 = _mm512_load_si512(q0 + 64 * kg), b1 = _mm512_load_si512(q1 + 64 * kg);
            for (int c = 0; c < C; ++c) {
                const __m512i xb = bcast4(x[c] + 32 * u + 4 * kg);
                s0[c] = _mm512_dpbusd_epi32(s0[c], b0, xb);
                s1[c] = _mm512_dpbusd_epi32(s1[c], b1, xb);
            }
        }
        __m512i sc0 = _mm512_load_si512(P0.sc + 32 * u + 16 * h);
        __m512i sc1 = _mm512_load_si512(P1.sc + 32 * u + 16 * h);
        if constexpr (kSplit) sc0 = mul.scale_pair(sc0), sc1 = mul.scale_pair(sc1);
        for (int c = 0; c < C; ++c) {
            if constexpr (!kSplit) {
                is0[c] = _mm512_add_epi32(is0[c], _mm512_mullo_epi32(sc0, s0[c]));
                is1[c] = _mm512_add_epi32(is1[c], _mm512_mullo_epi32(sc1, s1[c]));
            } else {
                is0[c] = mul.add(is0[c], s0[c], sc0);
                is1[c] = mul.add(is1[c], s1[c], sc1);
            }
        }
    }
}

// The same pairing for the K-quants. The integer sums are exact in any order, so the min terms
// (aux) are summed at the end of each scale group instead of per unit, which keeps the unit loop
// within the registers (2C chains and 2C group sums); the float fold is DotSink::kgroup's.
template <int C, bool kQ6, bool kSplit>
void kernel_kquant_pair(const Panel& P0, const Panel& P1, int64_t nu, const ActPack& a, int64_t m,
                        __m512* acc0, __m512* acc1) {
    const int64_t ng = nu / 8;
    const ScaleMul mul;
    const int8_t* x[C];
    for (int c = 0; c < C; ++c) x[c] = a.q + (m + c) * a.K;
    for (int64_t g = 0; g < ng; ++g) {
        __m512i is0[C], is1[C];
        for (int c = 0; c < C; ++c) is0[c] = is1[c] = _mm512_setzero_si512();
        if constexpr (kQ6) {
            for (int64_t u = 8 * g; u < 8 * g + 8; ++u) kquant_unit_pair<C, kQ6, kSplit>(P0, P1, x, u, mul, is0, is1);
        } else {   // unrolled, GCC keeps the group sums in registers instead of copying them
                   // around the loop (Q4_K 512 x 896 x 4864, 1 thread: +8%; Q6_K unrolled: -3%)
#pragma GCC unroll 8
            for (int64_t u = 8 * g; u < 8 * g + 8; ++u) kquant_unit_pair<C, kQ6, kSplit>(P0, P1, x, u, mul, is0, is1);
        }
        // The min sums of all C rows, unit by unit: 2C independent dpwssd chains (row by row,
        // each row's two chains of 8 waited out the dpwssd latency in turn).
        __m512i aux0s[C], aux1s[C];
        for (int c = 0; c < C; ++c) aux0s[c] = aux1s[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int64_t u = 8 * g; u < 8 * g + 8; ++u) {
            const __m512i pair0 = _mm512_load_si512(P0.pair + 16 * u), pair1 = _mm512_load_si512(P1.pair + 16 * u);
            for (int c = 0; c < C; ++c) {
                const __m512i bs = _mm512_set1_epi32(a.bsum[(m + c) * nu + u]);
                aux0s[c] = _mm512_dpwssd_epi32(aux0s[c], pair0, bs);
                aux1s[c] = _mm512_dpwssd_epi32(aux1s[c], pair1, bs);
            }
        }
        const __m512 dw0 = _mm512_load_ps(P0.d + 16 * g), dw1 = _mm512_load_ps(P1.d + 16 * g);
        for (int c = 0; c < C; ++c) {
            const __m512i aux0 = aux0s[c], aux1 = aux1s[c];
            const __m512 dx = _mm512_set1_ps(a.d[(m + c) * ng + g]);
            if constexpr (kQ6) {
                is0[c] = _mm512_sub_epi32(is0[c], _mm512_slli_epi32(aux0, 5));
                is1[c] = _mm512_sub_epi32(is1[c], _mm512_slli_epi32(aux1, 5));
            }
            acc0[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is0[c]), _mm512_mul_ps(dw0, dx), acc0[c]);
            acc1[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is1[c]), _mm512_mul_ps(dw1, dx), acc1[c]);
            if constexpr (!kQ6) {
                acc0[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(aux0), neg(_mm512_mul_ps(_mm512_load_ps(P0.m + 16 * g), dx)), acc0[c]);
                acc1[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(aux1), neg(_mm512_mul_ps(_mm512_load_ps(P1.m + 16 * g), dx)), acc1[c]);
            }
        }
    }
}

// Rows [m, m + C) against the panel pair at weight rows p (16 valid) and p + 16 (lanes1 valid).
template <int C>
void run_rows_pair(GGMLType t, const Panel& P0, const Panel& P1, int64_t nu, const ActPack& a, int64_t m,
                   float* y, int64_t ldy, __mmask16 lanes1) {
    __m512 acc0[C], acc1[C];
    for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = _mm512_setzero_ps();
    switch (family(t)) {   // every family, no default: -Wswitch names one left out
        case BseqFamily::LegacyMin: kernel_legacy_pair<C, true>(P0, P1, nu, a, m, acc0, acc1); break;
        case BseqFamily::KQuant: kernel_kquant_pair<C, false, true>(P0, P1, nu, a, m, acc0, acc1); break;
        case BseqFamily::Q6K:
            if (q6k_scale_split_pays()) kernel_kquant_pair<C, true, true>(P0, P1, nu, a, m, acc0, acc1);
            else kernel_kquant_pair<C, true, false>(P0, P1, nu, a, m, acc0, acc1);
            break;
        case BseqFamily::Legacy: kernel_legacy_pair<C, false>(P0, P1, nu, a, m, acc0, acc1); break;
        case BseqFamily::None: throw std::logic_error("bseq::matmul_avx512: not a block-sequential type");
    }
    for (int c = 0; c < C; ++c) {
        _mm512_storeu_ps(y + (m + c) * ldy, acc0[c]);
        _mm512_mask_storeu_ps(y + (m + c) * ldy + kPanel, lanes1, acc1[c]);
    }
}

template <int C>
void replay_rows(GGMLType t, const uint8_t* panel, size_t panel_bytes, int64_t nu, const ActPack& a, int64_t m,
                 float* y, int64_t ldy, __mmask16 lanes) {
    DotSink<C> sink(a, m, nu);
    const uint8_t* in = panel;
    // Decode: the prefetch pays on Intel, not on AMD (isa.cpp).
    pack_panel(t, ReplayRows{&in, panel_bytes, replay_prefetch_pays()}, nu, sink);
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (m + c) * ldy, lanes, sink.acc[c]);
}

template <int C>
void run_rows(GGMLType t, const Panel& P, int64_t nu, const ActPack& a, int64_t m, float* y,
              int64_t ldy, __mmask16 lanes) {
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    switch (family(t)) {   // every family, no default: -Wswitch names one left out
        case BseqFamily::LegacyMin: kernel_legacy<C, true>(P, nu, a, m, acc); break;
        case BseqFamily::KQuant: kernel_kquant<C, false>(P, nu, a, m, acc); break;
        case BseqFamily::Q6K: kernel_kquant<C, true>(P, nu, a, m, acc); break;
        case BseqFamily::Legacy: kernel_legacy<C, false>(P, nu, a, m, acc); break;
        case BseqFamily::None: throw std::logic_error("bseq::matmul_avx512: not a block-sequential type");
    }
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (m + c) * ldy, lanes, acc[c]);
}

// Activation rows per pass over a packed panel: each panel is unpacked once per block, so larger
// blocks unpack less often (64 -> 256: +5-10% on SmolLM2 / Qwen2.5 prompts); 256 rows of
// activation quants stay in L2 for the models here (K <= 4864: 1.2 MiB).
constexpr int64_t kActBlock = 256;
constexpr int64_t kDirectRows = 3;  // up to this many rows of GGUF-layout weights: bseq_decode.cpp (no packing)

// Unpacks the panel of weight rows [p, p + 16) into `sink`'s panel, from the repacked arena or
// straight from the GGUF rows. Repacked panels are prefetched on every CPU: unlike the decode
// kernels, this packing alternates with compute on the packed panels, and on Zen 4
// Gemma3's 262,144 x 640 Q8_0 output matrix at 4 / 16 activation rows took 7.1-7.3 / 13-14 ms
// with the prefetch and 9.4-10.5 / 17-18 ms without.
void pack_at(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t nu, int64_t p, bool repacked,
             PanelSink& sink) {
    if (repacked) {
        const uint8_t* in = W + p / kPanel * (kPanel * ws);
        pack_panel(t, ReplayRows{&in, kPanel * ws, true}, nu, sink);
    } else {
        const Rows R(W + p * ws, ws, (int)std::min<int64_t>(kPanel, N - p));
        pack_panel(t, GgufRows{R}, nu, sink);
    }
}

}  // namespace

// replay_rows<C> for C = 1 .. kReplayRows, indexed by C - 1.
using ReplayFn = void (*)(GGMLType, const uint8_t*, size_t, int64_t, const ActPack&, int64_t, float*, int64_t,
                          __mmask16);
template <size_t... I>
constexpr std::array<ReplayFn, sizeof...(I)> replay_table(std::index_sequence<I...>) {
    return {&replay_rows<(int)I + 1>...};
}
constexpr auto kReplay = replay_table(std::make_index_sequence<kReplayRows>{});

void replay_panels(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                   int64_t m, float* Y, int64_t ldy) {
    const int64_t nu = a.K / 32;
    const size_t panel_bytes = kPanel * ws;
    const ReplayFn rows = kReplay[a.M - m - 1];
    for (int64_t p = n0; p < n1; p += kPanel) {
        const __mmask16 lanes = (__mmask16)((1u << std::min<int64_t>(kPanel, N - p)) - 1);
        rows(t, W + p / kPanel * panel_bytes, panel_bytes, nu, a, m, Y + p, ldy, lanes);
    }
}

void matmul_avx512(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1,
                   const ActPack& a, float* Y, int64_t ldy, bool use_amx, bool repacked) {
    const int64_t nu = a.K / 32;
    if (repacked && use_amx && amx_reads_repacked(t, a.M) && amx_q8_0_repacked(W, ws, N, n0, n1, a, Y, ldy) == a.M)
        return;
    if (repacked && a.M <= replay_rows_max(t)) return replay_panels(t, W, ws, N, n0, n1, a, 0, Y, ldy);
    if (!repacked && a.M <= kDirectRows) return matmul_direct(t, W, ws, N, n0, n1, a, Y, ldy);
    thread_local PanelBuffer buf, buf_pair;
    const Panel P = buf.get(nu);
    for (int64_t mb = 0; mb < a.M; mb += kActBlock) {
        const int64_t me = std::min(a.M, mb + kActBlock);
        // The pair kernels serve every block that AMX does not take (amx_pays).
        const bool amx = use_amx && amx_pays(t, me - mb);
        const bool pairs = !amx;
        const Panel P1 = pairs ? buf_pair.get(nu) : P;
        for (int64_t p = n0; p < n1;) {
            if (pairs && p + kPanel < n1) {
                PanelSink s0{P}, s1{P1};
                pack_at(t, W, ws, N, nu, p, repacked, s0);
                pack_at(t, W, ws, N, nu, p + kPanel, repacked, s1);
                const __mmask16 lanes1 = (__mmask16)((1u << std::min<int64_t>(kPanel, N - p - kPanel)) - 1);
                int64_t m = mb;
                for (; m + 4 <= me; m += 4) run_rows_pair<4>(t, P, P1, nu, a, m, Y + p, ldy, lanes1);
                switch (me - m) {
                    case 3: run_rows_pair<3>(t, P, P1, nu, a, m, Y + p, ldy, lanes1); break;
                    case 2: run_rows_pair<2>(t, P, P1, nu, a, m, Y + p, ldy, lanes1); break;
                    case 1: run_rows_pair<1>(t, P, P1, nu, a, m, Y + p, ldy, lanes1); break;
                    default: break;
                }
                p += 2 * kPanel;
                continue;
            }
            const int nvalid = (int)std::min<int64_t>(kPanel, N - p);
            PanelSink sink{P};
            if (amx) {      // amx_rows reads P.qs; VNNI takes rows past the last 16
                sink.to_signed = true;
                sink.to_unsigned = (me - mb) % 16 != 0;
                sink.offset = _mm512_set1_epi8((char)signed_offset(t));
            }
            pack_at(t, W, ws, N, nu, p, repacked, sink);
            const __mmask16 lanes = (__mmask16)((1u << nvalid) - 1);
            int64_t m = mb;
            if (amx) m = amx_rows(t, P, nu, a, m, me, Y + p, ldy, lanes);
            for (; m + 4 <= me; m += 4) run_rows<4>(t, P, nu, a, m, Y + p, ldy, lanes);
            switch (me - m) {
                case 3: run_rows<3>(t, P, nu, a, m, Y + p, ldy, lanes); break;
                case 2: run_rows<2>(t, P, nu, a, m, Y + p, ldy, lanes); break;
                case 1: run_rows<1>(t, P, nu, a, m, Y + p, ldy, lanes); break;
                default: break;
            }
            p += kPanel;
        }
    }
}

void repack_panels(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t K, uint8_t* dst,
                   int64_t p0, int64_t p1) {
    const int64_t nu = K / 32;
    for (int64_t p = p0; p < p1; ++p) {
        const int nvalid = (int)std::min<int64_t>(kPanel, N - p * kPanel);
        const Rows R(W + p * kPanel * ws, ws, nvalid);
        uint8_t* out = dst + p * kPanel * ws;
        NullSink sink;
        pack_panel(t, RecordRows{{R}, &out}, nu, sink);
        if (out != dst + (p + 1) * kPanel * ws)
            throw std::logic_error("bseq::repack_panels: repacked panel size differs from the GGUF rows'");
    }
}

}  // namespace bseq
}  // namespace lll

#else   // !LLL_BUILD_AVX512
#include <stdexcept>
namespace lll {
namespace bseq {
void matmul_avx512(GGMLType, const uint8_t*, size_t, int64_t, int64_t, int64_t, const ActPack&, float*,
                   int64_t, bool, bool) {
    throw std::logic_error("bseq::matmul_avx512: not compiled in");
}
void repack_panels(GGMLType, const uint8_t*, size_t, int64_t, int64_t, uint8_t*, int64_t, int64_t) {
    throw std::logic_error("bseq::repack_panels: not compiled in");
}
}  // namespace bseq
}  // namespace lll
#endif
