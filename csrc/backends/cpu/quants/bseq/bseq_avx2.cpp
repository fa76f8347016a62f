// bseq_avx2.cpp — block-sequential matmul (bseq.h) with AVX2 (no VNNI), every bseq type.
//
// It reads the repacked panels of bseq_avx512.cpp (repack_panels; the portable
// repack_panels_portable writes the same bytes on CPUs without AVX-512). A panel holds 16 weight
// rows; each 64-byte vector of it is split in two halves, rows 0-7 and rows 8-15, so one ymm
// holds 8 weight rows (lanes) x 4 consecutive quants. An activation row's 4 quants go in as a
// broadcast dword: vpmaddubsw makes int16 pair sums per lane and vpmaddwd adds the pairs, which
// together do what one vpdpbusd does on VNNI. The int16 sums of four k-groups are added before
// vpmaddwd for 4- and 5-bit quants (|sum| <= 4 * 2 * 31 * 128 < 32768; activations are >= -128),
// of two for Q6_K (2 * 2 * 63 * 128); Q8_0's signed quants use |q| x sign(x, q)
// (|sum| <= 2 * 128 * 127) and go to int32 every k-group. K-quants take their sub-block scale in
// that vpmaddwd ((sc, sc) int16 pairs). Every lane ends a unit with its exact integer sum, and
// the float fold of bseq.h runs with rows in lanes, so results are bit-identical to dot_ref, to
// the AVX-512 kernels and to the decode path here, which runs the same operations on one to
// three activation rows straight from the panels.
#include "backends/cpu/quants/bseq/bseq.h"

#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX2
#include <immintrin.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backends/cpu/quants/bseq/bseq_panel.h"

namespace lll {
namespace bseq {
namespace {

// Where the fields of one repacked unit (16 rows x 32 quants) lie, per type (bseq_avx512.cpp's
// packers read them in this order: quants, fifth bits, d, m).
struct UnitLayout {
    int bytes;      // 16 x the GGUF block; the transposed quants come first (4 or 8 64-byte vectors)
    int qh;         // offset of the 16 rows' 32-bit fifth-bit words, or -1
    int d, m;       // offsets of 16 f16 scales, 16 f16 mins (m: -1 without)
};

UnitLayout unit_layout(GGMLType t) {
    switch (t) {
        case GGMLType::Q4_0: return {16 * (int)sizeof(block_q4_0), -1, 256, -1};
        case GGMLType::Q4_1: return {16 * (int)sizeof(block_q4_1), -1, 256, 288};
        case GGMLType::Q5_0: return {16 * (int)sizeof(block_q5_0), 256, 320, -1};
        case GGMLType::Q5_1: return {16 * (int)sizeof(block_q5_1), 256, 320, 352};
        case GGMLType::Q8_0: return {16 * (int)sizeof(block_q8_0), -1, 512, -1};
        default: throw std::invalid_argument("bseq::matmul_avx2: not a legacy weight type");
    }
}

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Dword whose byte i is 0x10 when bit i of the index (0..7) is set: a Q5 fifth-bit spread.
alignas(32) constexpr int32_t kSpread5[8] = {0x00000000, 0x00000010, 0x00001000, 0x00001010,
                                             0x00100000, 0x00100010, 0x00101000, 0x00101010};

// One half (8 rows) of a repacked unit: the quants as 8 k-groups (unsigned; Q8_0: signed, with
// their absolute values in A), the scales d and the mins m.
struct HalfUnit {
    __m256i B[8], A[8];
    __m256 d, m;
};

template <GGMLType T>
inline void unpack_half(const uint8_t* unit, const UnitLayout& L, int h, HalfUnit* U) {
    const uint8_t* q = unit + 32 * h;
    if constexpr (T == GGMLType::Q8_0) {
        for (int kg = 0; kg < 8; ++kg) {
            U->B[kg] = _mm256_loadu_si256((const __m256i*)(q + 64 * kg));
            U->A[kg] = _mm256_abs_epi8(U->B[kg]);
        }
    } else {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int i = 0; i < 4; ++i) {
            const __m256i v = _mm256_loadu_si256((const __m256i*)(q + 64 * i));
            U->B[i] = _mm256_and_si256(v, m4);
            U->B[4 + i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        if constexpr (T == GGMLType::Q5_0 || T == GGMLType::Q5_1) {
            const __m256i qh = _mm256_loadu_si256((const __m256i*)(unit + L.qh + 32 * h));
            const __m256i tab = _mm256_load_si256((const __m256i*)kSpread5);
            for (int kg = 0; kg < 8; ++kg) {   // bits 4kg..4kg+3 of a row's qh -> bit 4 of its 4 bytes
                const __m256i nib = _mm256_srli_epi32(qh, 4 * kg);
                const __m256i b3 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(nib, 3), _mm256_set1_epi32(1)), 28);
                U->B[kg] = _mm256_or_si256(U->B[kg], _mm256_or_si256(_mm256_permutevar8x32_epi32(tab, nib), b3));
            }
        }
    }
    U->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(unit + L.d + 16 * h)));
    if (L.m >= 0) U->m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(unit + L.m + 16 * h)));
}

constexpr bool has_min(GGMLType T) { return T == GGMLType::Q4_1 || T == GGMLType::Q5_1; }

// The exact unit sum of 8 rows (lanes) with activation row x (32 quants), as int32 lanes.
// B: the unit's 8 k-group vectors (Q8_0: signed quants, A: their absolute values).
template <GGMLType T>
inline __m256i unit_sum(const __m256i* B, const __m256i* A, const int8_t* x) {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (T == GGMLType::Q8_0) {
        __m256i s = _mm256_setzero_si256();
        for (int kg = 0; kg < 8; ++kg) {
            const __m256i p = _mm256_maddubs_epi16(A[kg], _mm256_sign_epi8(bcast4(x + 4 * kg), B[kg]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
        }
        return s;
    } else {
        __m256i lo = _mm256_maddubs_epi16(B[0], bcast4(x));
        __m256i hi = _mm256_maddubs_epi16(B[4], bcast4(x + 16));
        for (int kg = 1; kg < 4; ++kg) {
            lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(B[kg], bcast4(x + 4 * kg)));
            hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(B[4 + kg], bcast4(x + 16 + 4 * kg)));
        }
        return _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
    }
}

// The float fold of bseq.h for unit i of an activation row: acc = fma(isum, d_w * d_x, acc)
// (and the min term). Q8_0's sum is already sum q x; the 4/5-bit types subtract the bias.
template <GGMLType T>
inline __m256 fold(__m256i s, __m256 dw, __m256 mw, const ActPack& a, int64_t i, __m256 acc) {
    if constexpr (T == GGMLType::Q4_0 || T == GGMLType::Q5_0) s = _mm256_add_epi32(s, _mm256_set1_epi32(a.nbias[i]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[i])), acc);
    if constexpr (has_min(T)) acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s[i]), acc);
    return acc;
}

inline void store_lanes(float* y, __m256 v, int valid) {
    if (valid >= 8) {
        _mm256_storeu_ps(y, v);
    } else if (valid > 0) {
        alignas(32) float t[8];
        _mm256_store_ps(t, v);
        memcpy(y, t, (size_t)valid * sizeof(float));
    }
}

// Decode: activation rows [0, C) against one repacked panel, unpacked unit by unit as it streams.
template <GGMLType T, int C>
void replay_rows(const uint8_t* panel, const UnitLayout& L, int64_t nu, const ActPack& a, float* y,
                 int64_t ldy, int valid) {
    __m256 acc[2][C];
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < C; ++c) acc[h][c] = _mm256_setzero_ps();
    for (int64_t u = 0; u < nu; ++u) {
        const uint8_t* unit = panel + u * L.bytes;
        for (int h = 0; h < 2; ++h) {
            HalfUnit U;
            unpack_half<T>(unit, L, h, &U);
            for (int c = 0; c < C; ++c)
                acc[h][c] = fold<T>(unit_sum<T>(U.B, U.A, a.q + c * a.K + 32 * u), U.d, U.m, a, c * nu + u, acc[h][c]);
        }
    }
    for (int c = 0; c < C; ++c)
        for (int h = 0; h < 2; ++h) store_lanes(y + c * ldy + 8 * h, acc[h][c], valid - 8 * h);
}

// Prompt: the panel unpacked once into P (per unit: 8 k-groups x 64 bytes, half h at 32 h; Q8_0's
// absolute values in P.qs; d and m as floats), then reused by every activation row of the block.
template <GGMLType T>
void unpack_panel(const uint8_t* panel, const UnitLayout& L, int64_t nu, const Panel& P) {
    for (int64_t u = 0; u < nu; ++u) {
        for (int h = 0; h < 2; ++h) {
            HalfUnit U;
            unpack_half<T>(panel + u * L.bytes, L, h, &U);
            for (int kg = 0; kg < 8; ++kg) {
                _mm256_store_si256((__m256i*)(P.q + u * 512 + 64 * kg + 32 * h), U.B[kg]);
                if constexpr (T == GGMLType::Q8_0) _mm256_store_si256((__m256i*)(P.qs + u * 512 + 64 * kg + 32 * h), U.A[kg]);
            }
            _mm256_store_ps(P.d + 16 * u + 8 * h, U.d);
            if constexpr (has_min(T)) _mm256_store_ps(P.m + 16 * u + 8 * h, U.m);
        }
    }
}

// Rows [m, m + C) x half h of a packed panel.
template <GGMLType T, int C>
void panel_rows(const Panel& P, int64_t nu, const ActPack& a, int64_t m, int h, float* y, int64_t ldy, int valid) {
    __m256 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t u = 0; u < nu; ++u) {
        const __m256i* B = (const __m256i*)(P.q + u * 512 + 32 * h);
        const __m256i* A = (const __m256i*)(P.qs + u * 512 + 32 * h);
        __m256i Bk[8], Ak[8];
        for (int kg = 0; kg < 8; ++kg) {   // every other 32 bytes: the half's k-groups
            Bk[kg] = _mm256_load_si256(B + 2 * kg);
            if constexpr (T == GGMLType::Q8_0) Ak[kg] = _mm256_load_si256(A + 2 * kg);
        }
        const __m256 dw = _mm256_load_ps(P.d + 16 * u + 8 * h);
        const __m256 mw = has_min(T) ? _mm256_load_ps(P.m + 16 * u + 8 * h) : dw;
        for (int c = 0; c < C; ++c)
            acc[c] = fold<T>(unit_sum<T>(Bk, Ak, a.q + (m + c) * a.K + 32 * u), dw, mw, a, (m + c) * nu + u, acc[c]);
    }
    for (int c = 0; c < C; ++c) store_lanes(y + (m + c) * ldy + 8 * h, acc[c], valid - 8 * h);
}

// ---- K-quants (Q4_K, Q5_K, Q6_K): a scale group of 256 is 8 units -----------------------------
//
// Unpacked per group into a Panel (per unit u: quants at q + 512 u + 64 kg + 32 h; sub-block
// scales as int16 pairs (sc, sc) at sc + 32 u + 8 h (Q6_K: the second 16-half's at + 16); the
// min pair (m, m), or Q6_K's (sc0, sc1), at pair + 16 u + 8 h; d and dmin at d / m + 16 g + 8 h).
// vpmaddwd of the int16 pair sums with (sc, sc) gives sc x the sum directly, and with the
// activation's int16 16-sums the min (or Q6_K's -32 offset) term: no 32-bit multiply anywhere.

inline __m256i half_of(const uint8_t* v, int h) { return _mm256_loadu_si256((const __m256i*)(v + 32 * h)); }
inline __m256i lo4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline __m256i hi4(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
inline __m256i pair16(__m256i lo, __m256i hi) {
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(hi, 16));
}
// The f16 in the low (or high) 16 bits of 8 dword lanes, as floats.
inline __m256 f16_lanes(__m256i v, bool high) {
    if (high) v = _mm256_srli_epi32(v, 16);
    else v = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);   // qwords 0, 2
    return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

// Sub-block j's scale and min for 8 rows (a0..a2: each row's 12 scale bytes as 3 dwords);
// kern::k4_scale_min with rows in lanes.
inline void k4_scales8(__m256i a0, __m256i a1, __m256i a2, int j, __m256i* sc, __m256i* mn) {
    const __m256i m6 = _mm256_set1_epi32(63), m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3);
    if (j < 4) {
        *sc = _mm256_and_si256(_mm256_srli_epi32(a0, 8 * j), m6);
        *mn = _mm256_and_si256(_mm256_srli_epi32(a1, 8 * j), m6);
    } else {
        const int sh = 8 * (j - 4);
        const __m256i hs = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a0, sh + 6), m2), 4);
        const __m256i hm = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a1, sh + 6), m2), 4);
        *sc = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a2, sh), m4), hs);
        *mn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a2, sh + 4), m4), hm);
    }
}

// A K-quant unit's exact contributions for C activation rows: isum += sc x (unit sum) and
// aux += the min (Q6_K: offset) pair against the activation's int16 16-sums; then, per group, the
// float fold of DotSink::kgroup (bseq_avx512.cpp). B: the unit's 8 k-groups for one half.
template <GGMLType T, int C>
struct KFold {
    static constexpr bool kQ6 = T == GGMLType::Q6_K;
    const ActPack& a;
    int64_t m;
    __m256i isum[C], aux[C];
    KFold(const ActPack& a_, int64_t m_) : a(a_), m(m_) { reset(); }
    void reset() {
        for (int c = 0; c < C; ++c) isum[c] = aux[c] = _mm256_setzero_si256();
    }
    void unit(int64_t u, const __m256i* B, __m256i sc0, __m256i sc1, __m256i pair) {
        const int64_t nu = a.K / 32;
        for (int c = 0; c < C; ++c) {
            const int8_t* x = a.q + (m + c) * a.K + 32 * u;
            __m256i s;
            if constexpr (kQ6) {   // 6-bit quants: int16 pair sums of two k-groups at most
                __m256i p[4];
                for (int i = 0; i < 4; ++i)
                    p[i] = _mm256_add_epi16(_mm256_maddubs_epi16(B[2 * i], bcast4(x + 8 * i)),
                                            _mm256_maddubs_epi16(B[2 * i + 1], bcast4(x + 8 * i + 4)));
                s = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p[0], sc0), _mm256_madd_epi16(p[1], sc0)),
                                     _mm256_add_epi32(_mm256_madd_epi16(p[2], sc1), _mm256_madd_epi16(p[3], sc1)));
            } else {
                __m256i lo = _mm256_maddubs_epi16(B[0], bcast4(x)), hi = _mm256_maddubs_epi16(B[4], bcast4(x + 16));
                for (int kg = 1; kg < 4; ++kg) {
                    lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(B[kg], bcast4(x + 4 * kg)));
                    hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(B[4 + kg], bcast4(x + 16 + 4 * kg)));
                }
                s = _mm256_add_epi32(_mm256_madd_epi16(lo, sc0), _mm256_madd_epi16(hi, sc0));
            }
            isum[c] = _mm256_add_epi32(isum[c], s);
            aux[c] = _mm256_add_epi32(aux[c], _mm256_madd_epi16(pair, _mm256_set1_epi32(a.bsum[(m + c) * nu + u])));
        }
    }
    void group(int64_t g, __m256 dw, __m256 dmin, __m256* acc) {
        const int64_t ng = a.K / 256;
        for (int c = 0; c < C; ++c) {
            const __m256 dx = _mm256_set1_ps(a.d[(m + c) * ng + g]);
            if constexpr (kQ6) isum[c] = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(aux[c], 5));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, dx), acc[c]);
            if constexpr (!kQ6)
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(aux[c]),
                                         _mm256_xor_ps(_mm256_mul_ps(dmin, dx), _mm256_set1_ps(-0.0f)), acc[c]);
        }
        reset();
    }
};

// Where an unpacked K-quant group goes: StorePanel keeps it in P (prompts: every activation row
// of the block reuses it; per unit u: quants at q + 512 u + 64 kg + 32 h, the (sc, sc) int16
// pairs at sc + 32 u + 8 h (Q6_K's second 16-half at + 16), the min pair (m, m) or Q6_K's
// (sc0, sc1) at pair + 16 u + 8 h, d / dmin at d / m + 16 g + 8 h); FoldNow folds it into C rows
// at once (decode), with the same operations as the kernel that reads P back.
struct StorePanel {
    const Panel& P;
    int h;
    void unit(int64_t u, const __m256i* B, __m256i sc0, __m256i sc1, __m256i pair) {
        for (int kg = 0; kg < 8; ++kg) _mm256_store_si256((__m256i*)(P.q + u * 512 + 64 * kg + 32 * h), B[kg]);
        _mm256_store_si256((__m256i*)(P.sc + 32 * u + 8 * h), sc0);
        _mm256_store_si256((__m256i*)(P.sc + 32 * u + 16 + 8 * h), sc1);
        _mm256_store_si256((__m256i*)(P.pair + 16 * u + 8 * h), pair);
    }
    void group(int64_t g, __m256 dw, __m256 dmin) {
        _mm256_store_ps(P.d + 16 * g + 8 * h, dw);
        _mm256_store_ps(P.m + 16 * g + 8 * h, dmin);
    }
};

template <GGMLType T, int C>
struct FoldNow {
    KFold<T, C>& fold;
    __m256* acc;
    void unit(int64_t u, const __m256i* B, __m256i sc0, __m256i sc1, __m256i pair) { fold.unit(u, B, sc0, sc1, pair); }
    void group(int64_t g, __m256 dw, __m256 dmin) { fold.group(g, dw, dmin, acc); }
};

// Group g of a repacked Q4_K / Q5_K panel (`grp`: its bytes), half h, into `sink`.
template <bool kQ5, class Sink>
void unpack_k4_group(const uint8_t* grp, int h, int64_t g, Sink& sink) {
    const uint8_t* in = grp;
    __m256i qh[8];
    if constexpr (kQ5) {
        for (int kg = 0; kg < 8; ++kg) qh[kg] = half_of(in + 64 * kg, h);
        in += 512;
    }
    const __m256i a0 = half_of(in, h), a1 = half_of(in + 64, h), a2 = half_of(in + 128, h);
    in += 192;
    for (int c = 0; c < 4; ++c, in += 512) {
        for (int odd = 0; odd < 2; ++odd) {
            const int j = 2 * c + odd;
            __m256i B[8];
            for (int kg = 0; kg < 8; ++kg) {
                const __m256i t = half_of(in + 64 * kg, h);
                B[kg] = odd ? hi4(t) : lo4(t);
                if constexpr (kQ5) {   // bit j of each qh byte -> bit 4
                    const __m256i hb = j <= 4 ? _mm256_slli_epi32(qh[kg], 4 - j) : _mm256_srli_epi32(qh[kg], j - 4);
                    B[kg] = _mm256_or_si256(B[kg], _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
                }
            }
            __m256i sc, mn;
            k4_scales8(a0, a1, a2, j, &sc, &mn);
            const __m256i scp = pair16(sc, sc);
            sink.unit(8 * g + j, B, scp, scp, pair16(mn, mn));
        }
    }
    const __m256i dm = half_of(in, h);
    sink.group(g, f16_lanes(dm, false), f16_lanes(dm, true));
}

// Group g of a repacked Q6_K panel, half h, into `sink`.
template <class Sink>
void unpack_q6_group(const uint8_t* grp, int h, int64_t g, Sink& sink) {
    __m256i s[4];   // each row's 16 int8 scales as 4 dwords
    for (int i = 0; i < 4; ++i) s[i] = half_of(grp + 64 * i, h);
    const uint8_t* in = grp + 256;
    for (int half = 0; half < 2; ++half, in += 1536) {
        for (int q = 0; q < 4; ++q) {   // unit 4 half + q: low / high nibbles of l0 / l1, bits 2q.. of hb
            const uint8_t* src = in + (q % 2 ? 512 : 0);
            __m256i B[8];
            for (int kg = 0; kg < 8; ++kg) {
                const __m256i l = half_of(src + 64 * kg, h), hb = half_of(in + 1024 + 64 * kg, h);
                const __m256i lo = q < 2 ? lo4(l) : hi4(l);
                const __m256i hi = q <= 2 ? _mm256_slli_epi32(hb, 4 - 2 * q) : _mm256_srli_epi32(hb, 2 * q - 4);
                B[kg] = _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
            }
            const int sb = 2 * (4 * half + q);   // sub-blocks sb, sb + 1 (16 elements each), sign-extended
            const __m256i sc0 = _mm256_srai_epi32(_mm256_slli_epi32(s[sb / 4], 24 - 8 * (sb % 4)), 24);
            const __m256i sc1 = _mm256_srai_epi32(_mm256_slli_epi32(s[(sb + 1) / 4], 24 - 8 * ((sb + 1) % 4)), 24);
            sink.unit(8 * g + 4 * half + q, B, pair16(sc0, sc0), pair16(sc1, sc1), pair16(sc0, sc1));
        }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(in + 16 * h)));
    sink.group(g, d, d);
}

template <GGMLType T, class Sink>
void unpack_kgroup(const uint8_t* grp, int h, int64_t g, Sink& sink) {
    if constexpr (T == GGMLType::Q6_K) unpack_q6_group(grp, h, g, sink);
    else unpack_k4_group<T == GGMLType::Q5_K>(grp, h, g, sink);
}

// Prompt: rows [m, m + C) x half h over every group of a panel unpacked into P.
template <GGMLType T, int C>
void kquant_rows(const Panel& P, const ActPack& a, int64_t m, int h, __m256* acc) {
    KFold<T, C> fold(a, m);
    for (int64_t g = 0; g < a.K / 256; ++g) {
        for (int64_t u = 8 * g; u < 8 * g + 8; ++u) {
            const uint8_t* q = P.q + u * 512 + 32 * h;
            __m256i B[8];
            for (int kg = 0; kg < 8; ++kg) B[kg] = _mm256_load_si256((const __m256i*)(q + 64 * kg));
            fold.unit(u, B, _mm256_load_si256((const __m256i*)(P.sc + 32 * u + 8 * h)),
                      _mm256_load_si256((const __m256i*)(P.sc + 32 * u + 16 + 8 * h)),
                      _mm256_load_si256((const __m256i*)(P.pair + 16 * u + 8 * h)));
        }
        fold.group(g, _mm256_load_ps(P.d + 16 * g + 8 * h), _mm256_load_ps(P.m + 16 * g + 8 * h), acc);
    }
}

constexpr int64_t kActBlock = 256;   // activation rows per pass over a packed panel (as AVX-512)
constexpr int64_t kDirectRows = 3;   // up to this many rows: straight from the repacked panel

// The repacked panel of weight rows [p, p + 16): in the arena, or repacked on the fly into `tmp`
// from the GGUF rows.
inline const uint8_t* panel_at(GGMLType t, const uint8_t* W, size_t ws, int64_t p, int valid, int64_t K,
                               bool repacked, std::vector<uint8_t>& tmp) {
    if (repacked) return W + p / kPanel * (kPanel * ws);
    if (tmp.size() < kPanel * ws) tmp.resize(kPanel * ws);
    repack_panels_portable(t, W + p * ws, ws, valid, K, tmp.data(), 0, 1);
    return tmp.data();
}

constexpr bool is_kquant(GGMLType T) { return T == GGMLType::Q4_K || T == GGMLType::Q5_K || T == GGMLType::Q6_K; }

// Decode, K-quants: each unit of a repacked panel folded as it is unpacked.
template <GGMLType T, int C>
void replay_kquant_rows(const uint8_t* panel, size_t group_bytes, const ActPack& a, float* y, int64_t ldy,
                        int valid) {
    __m256 acc[2][C];
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < C; ++c) acc[h][c] = _mm256_setzero_ps();
    KFold<T, C> fold(a, 0);
    for (int64_t g = 0; g < a.K / 256; ++g) {
        // Q6_K: the next group into L2 while this one is folded. Its unpacker reads a group's
        // fields out of order (three interleaved runs), which the hardware prefetchers follow
        // badly from DRAM (4864 x 4864, one row, Zen 4: 17.7 GOP/s without this, 34-40 with it;
        // Q4_K, read in order, lost a third with it).
        if (T == GGMLType::Q6_K && g + 1 < a.K / 256) {
            const uint8_t* next = panel + (g + 1) * group_bytes;
            for (size_t o = 0; o < group_bytes; o += 64) __builtin_prefetch(next + o, 0, 1);
        }
        for (int h = 0; h < 2; ++h) {
            FoldNow<T, C> sink{fold, acc[h]};
            unpack_kgroup<T>(panel + g * group_bytes, h, g, sink);
        }
    }
    for (int c = 0; c < C; ++c)
        for (int h = 0; h < 2; ++h) store_lanes(y + c * ldy + 8 * h, acc[h][c], valid - 8 * h);
}

template <GGMLType T, int C>
void decode_rows(const uint8_t* panel, const UnitLayout& L, size_t group_bytes, const ActPack& a,
                 float* y, int64_t ldy, int valid) {
    if constexpr (is_kquant(T)) replay_kquant_rows<T, C>(panel, group_bytes, a, y, ldy, valid);
    else replay_rows<T, C>(panel, L, a.K / 32, a, y, ldy, valid);
}

// Prompt: rows [m, m + C) x half h of a whole unpacked panel.
template <GGMLType T, int C>
void prompt_rows(const Panel& P, const ActPack& a, int64_t m, int h, float* y, int64_t ldy, int valid) {
    if constexpr (is_kquant(T)) {
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        kquant_rows<T, C>(P, a, m, h, acc);
        for (int c = 0; c < C; ++c) store_lanes(y + (m + c) * ldy + 8 * h, acc[c], valid - 8 * h);
    } else {
        panel_rows<T, C>(P, a.K / 32, a, m, h, y, ldy, valid);
    }
}

template <GGMLType T>
void unpack_whole_panel(const uint8_t* panel, const UnitLayout& L, size_t group_bytes, int64_t K, const Panel& P) {
    if constexpr (is_kquant(T)) {
        for (int64_t g = 0; g < K / 256; ++g)
            for (int h = 0; h < 2; ++h) {
                StorePanel sink{P, h};
                unpack_kgroup<T>(panel + g * group_bytes, h, g, sink);
            }
    } else {
        unpack_panel<T>(panel, L, K / 32, P);
    }
}

template <GGMLType T>
void matmul_type(const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                 float* Y, int64_t ldy, bool repacked) {
    const UnitLayout L = is_kquant(T) ? UnitLayout{} : unit_layout(T);
    const size_t group_bytes = kPanel * type_traits(T)->block_bytes;   // K-quants: one 256-block of 16 rows
    thread_local std::vector<uint8_t> tmp;
    thread_local PanelBuffer buf;
    const Panel P = buf.get(a.K / 32);
    if (a.M <= kDirectRows) {
        for (int64_t p = n0; p < n1; p += kPanel) {
            const int valid = (int)std::min<int64_t>(kPanel, N - p);
            const uint8_t* panel = panel_at(T, W, ws, p, valid, a.K, repacked, tmp);
            switch (a.M) {
                case 3: decode_rows<T, 3>(panel, L, group_bytes, a, Y + p, ldy, valid); break;
                case 2: decode_rows<T, 2>(panel, L, group_bytes, a, Y + p, ldy, valid); break;
                default: decode_rows<T, 1>(panel, L, group_bytes, a, Y + p, ldy, valid); break;
            }
        }
        return;
    }
    for (int64_t mb = 0; mb < a.M; mb += kActBlock) {   // the block's activation rows stay in L2
        const int64_t me = std::min(a.M, mb + kActBlock);
        for (int64_t p = n0; p < n1; p += kPanel) {
            const int valid = (int)std::min<int64_t>(kPanel, N - p);
            unpack_whole_panel<T>(panel_at(T, W, ws, p, valid, a.K, repacked, tmp), L, group_bytes, a.K, P);
            float* y = Y + p;
            for (int h = 0; h < 2 && 8 * h < valid; ++h) {
                int64_t m = mb;
                for (; m + 4 <= me; m += 4) prompt_rows<T, 4>(P, a, m, h, y, ldy, valid);
                switch (me - m) {
                    case 3: prompt_rows<T, 3>(P, a, m, h, y, ldy, valid); break;
                    case 2: prompt_rows<T, 2>(P, a, m, h, y, ldy, valid); break;
                    case 1: prompt_rows<T, 1>(P, a, m, h, y, ldy, valid); break;
                    default: break;
                }
            }
        }
    }
}

}  // namespace

void matmul_avx2(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                 float* Y, int64_t ldy, bool repacked) {
    switch (t) {
        case GGMLType::Q4_0: return matmul_type<GGMLType::Q4_0>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q4_1: return matmul_type<GGMLType::Q4_1>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q5_0: return matmul_type<GGMLType::Q5_0>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q5_1: return matmul_type<GGMLType::Q5_1>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q8_0: return matmul_type<GGMLType::Q8_0>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q4_K: return matmul_type<GGMLType::Q4_K>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q5_K: return matmul_type<GGMLType::Q5_K>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q6_K: return matmul_type<GGMLType::Q6_K>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        default: throw std::invalid_argument("bseq::matmul_avx2: not a block-sequential weight type");
    }
}

}  // namespace bseq
}  // namespace lll

#else   // !LLL_BUILD_AVX2
#include <stdexcept>
namespace lll {
namespace bseq {
void matmul_avx2(GGMLType, const uint8_t*, size_t, int64_t, int64_t, int64_t, const ActPack&, float*, int64_t, bool) {
    throw std::logic_error("bseq::matmul_avx2: not compiled in");
}
}  // namespace bseq
}  // namespace lll
#endif
