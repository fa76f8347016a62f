// bseq_avx2.cpp — block-sequential matmul (bseq.h) for the legacy types with AVX2 (no VNNI).
//
// It reads the repacked panels of bseq_avx512.cpp (repack_panels; the portable
// repack_panels_legacy writes the same bytes on CPUs without AVX-512). A panel holds 16 weight
// rows; each 64-byte vector of it is split in two halves, rows 0-7 and rows 8-15, so one ymm
// holds 8 weight rows (lanes) x 4 consecutive quants. An activation row's 4 quants go in as a
// broadcast dword: vpmaddubsw makes int16 pair sums per lane and vpmaddwd adds the pairs, which
// together do what one vpdpbusd does on VNNI. The int16 sums of four k-groups are added before
// vpmaddwd (4- and 5-bit quants: |sum| <= 4 * 2 * 31 * 128 < 32768); Q8_0's signed quants use
// |q| x sign(x, q) (|sum| <= 2 * 128 * 127) and go to int32 every k-group. Every lane ends a
// unit with its exact integer unit sum, and the float fold of bseq.h runs with rows in lanes,
// so results are bit-identical to dot_ref, to the AVX-512 kernels and to the decode path here,
// which runs the same operations on one to three activation rows straight from the panels.
#include "bseq.h"

#include "dot_impl.h"

#if LLL_BUILD_AVX2
#include <immintrin.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bseq_panel.h"

namespace lll {
namespace bseq {
namespace {

// Where the fields of one repacked unit (16 rows x 32 quants) lie, per type (bseq_avx512.cpp's
// packers read them in this order: quants, fifth bits, d, m).
struct UnitLayout {
    int bytes;      // 16 x the GGUF block
    int qs_vecs;    // 64-byte vectors of transposed quants: 4 (nibbles) or 8 (Q8_0)
    int qh;         // offset of the 16 rows' 32-bit fifth-bit words, or -1
    int d, m;       // offsets of 16 f16 scales, 16 f16 mins (m: -1 without)
};

UnitLayout unit_layout(GGMLType t) {
    switch (t) {
        case GGMLType::Q4_0: return {16 * (int)sizeof(block_q4_0), 4, -1, 256, -1};
        case GGMLType::Q4_1: return {16 * (int)sizeof(block_q4_1), 4, -1, 256, 288};
        case GGMLType::Q5_0: return {16 * (int)sizeof(block_q5_0), 4, 256, 320, -1};
        case GGMLType::Q5_1: return {16 * (int)sizeof(block_q5_1), 4, 256, 320, 352};
        case GGMLType::Q8_0: return {16 * (int)sizeof(block_q8_0), 8, -1, 512, -1};
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
// B / A: pointers to the unit's 8 k-group vectors, `stride` bytes apart.
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
    if constexpr (T == GGMLType::Q4_0 || T == GGMLType::Q5_0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(a.bias[i]));
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

constexpr int64_t kActBlock = 256;   // activation rows per pass over a packed panel (as AVX-512)
constexpr int64_t kDirectRows = 3;   // up to this many rows: straight from the repacked panel

// The repacked panel of weight rows [p, p + 16): in the arena, or repacked on the fly into `tmp`
// from the GGUF rows.
inline const uint8_t* panel_at(GGMLType t, const uint8_t* W, size_t ws, int64_t p, int valid, int64_t K,
                               bool repacked, std::vector<uint8_t>& tmp) {
    if (repacked) return W + p / kPanel * (kPanel * ws);
    if (tmp.size() < kPanel * ws) tmp.resize(kPanel * ws);
    repack_panels_legacy(t, W + p * ws, ws, valid, K, tmp.data(), 0, 1);
    return tmp.data();
}

template <GGMLType T>
void matmul_type(const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                 float* Y, int64_t ldy, bool repacked) {
    const UnitLayout L = unit_layout(T);
    const int64_t nu = a.K / 32;
    thread_local std::vector<uint8_t> tmp;
    if (a.M <= kDirectRows) {
        for (int64_t p = n0; p < n1; p += kPanel) {
            const int valid = (int)std::min<int64_t>(kPanel, N - p);
            const uint8_t* panel = panel_at(T, W, ws, p, valid, a.K, repacked, tmp);
            switch (a.M) {
                case 3: replay_rows<T, 3>(panel, L, nu, a, Y + p, ldy, valid); break;
                case 2: replay_rows<T, 2>(panel, L, nu, a, Y + p, ldy, valid); break;
                default: replay_rows<T, 1>(panel, L, nu, a, Y + p, ldy, valid); break;
            }
        }
        return;
    }
    thread_local PanelBuffer buf;
    const Panel P = buf.get(nu);
    for (int64_t mb = 0; mb < a.M; mb += kActBlock) {   // the block's activation rows stay in L2
        const int64_t me = std::min(a.M, mb + kActBlock);
        for (int64_t p = n0; p < n1; p += kPanel) {
            const int valid = (int)std::min<int64_t>(kPanel, N - p);
            unpack_panel<T>(panel_at(T, W, ws, p, valid, a.K, repacked, tmp), L, nu, P);
            float* y = Y + p;
            for (int h = 0; h < 2 && 8 * h < valid; ++h) {
                int64_t m = mb;
                for (; m + 4 <= me; m += 4) panel_rows<T, 4>(P, nu, a, m, h, y, ldy, valid);
                switch (me - m) {
                    case 3: panel_rows<T, 3>(P, nu, a, m, h, y, ldy, valid); break;
                    case 2: panel_rows<T, 2>(P, nu, a, m, h, y, ldy, valid); break;
                    case 1: panel_rows<T, 1>(P, nu, a, m, h, y, ldy, valid); break;
                    default: break;
                }
            }
        }
    }
}

}  // namespace

bool avx2_supported(GGMLType t) {
    switch (t) {
        case GGMLType::Q4_0: case GGMLType::Q4_1: case GGMLType::Q5_0: case GGMLType::Q5_1: case GGMLType::Q8_0:
            return true;
        default:
            return false;
    }
}

void matmul_avx2(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                 float* Y, int64_t ldy, bool repacked) {
    switch (t) {
        case GGMLType::Q4_0: return matmul_type<GGMLType::Q4_0>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q4_1: return matmul_type<GGMLType::Q4_1>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q5_0: return matmul_type<GGMLType::Q5_0>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q5_1: return matmul_type<GGMLType::Q5_1>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        case GGMLType::Q8_0: return matmul_type<GGMLType::Q8_0>(W, ws, N, n0, n1, a, Y, ldy, repacked);
        default: throw std::invalid_argument("bseq::matmul_avx2: not a legacy weight type");
    }
}

}  // namespace bseq
}  // namespace lll

#else   // !LLL_BUILD_AVX2
#include <stdexcept>
namespace lll {
namespace bseq {
bool avx2_supported(GGMLType) { return false; }
void matmul_avx2(GGMLType, const uint8_t*, size_t, int64_t, int64_t, int64_t, const ActPack&, float*, int64_t, bool) {
    throw std::logic_error("bseq::matmul_avx2: not compiled in");
}
}  // namespace bseq
}  // namespace lll
#endif
