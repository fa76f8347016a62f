// bseq_amx.cpp — block-sequential matmul (bseq.h) on Intel AMX tiles.
//
// One TDPBSUD multiplies 16 activation rows (signed int8, a tile of 16 x 32 bytes read straight
// from the row-major activation quants) by one packed 32-element unit of 16 weight rows
// (unsigned, the panel's B layout is exactly AMX's 8 x 64-byte B tile), giving the 16 x 16
// exact unit sums at once. Q4_0 / Q5_0 / Q8_0 use the panel's signed copy (q minus the type's
// offset) and TDPBSSD, so their sums arrive with the bias terms already subtracted. The float fold then runs with the same instructions, in the same
// order, as the VNNI kernels of bseq_avx512.cpp, so both paths give bit-identical results and
// which one runs (AMX for blocks of 16 rows, VNNI for the rest) never shows in the output.
#include "bseq_panel.h"
#include "dot_impl.h"

#if LLL_BUILD_AVX512 && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace lll {
namespace bseq {
namespace {

bool probe_amx() {
    const char* off = getenv("LOCALLLM_NO_AMX");
    if (off && *off && *off != '0') return false;
    if (!isa_available(Isa::AVX512)) return false;                  // AMX is part of that path
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;        // AMX-TILE, AMX-INT8
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;          // Linux arch_prctl
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

struct TileConfig {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Tile registers (GCC's _tile_* macros paste the number into the instruction: literals only).
#define kC 0      // unit sums, int32
#define kA 1      // activations
#define kB 2      // packed weights
#define kC2 3
#define kA16 4    // default layout: Q6_K's half units; rows64 layout: two more unit sums
#define kB16 5
#define kC3 4
#define kC4 5
#define kA2 6     // a second unit in flight (legacy types)
#define kB2 7

// c += a . b, with signed (TDPBSSD) or unsigned (TDPBSUD) weight bytes b.
#define LLL_TDP(kSigned, c, a, b)              \
    do {                                       \
        if constexpr (kSigned) _tile_dpbssd(c, a, b); \
        else _tile_dpbsud(c, a, b);            \
    } while (0)

// Two tile layouts, differing in tiles 4 and 5: the default one (16-row kernels, with Q6_K's
// 16-element halves) and rows64's (four unit-sum tiles). Each thread keeps its layout loaded
// and reloads it only when the kernel it runs needs the other one.
enum class TileLayout { kNone, kDefault, kRows64 };

void configure_tiles(TileLayout layout) {
    alignas(64) TileConfig cfg = {};
    cfg.palette = 1;
    auto set = [&](int t, int rows, int colsb) { cfg.rows[t] = (uint8_t)rows; cfg.colsb[t] = (uint16_t)colsb; };
    set(kC, 16, 64);      // 16 activation rows x 16 weight rows, int32
    set(kA, 16, 32);      // 16 activation rows x one 32-element unit
    set(kB, 8, 64);       // one unit of the panel: 8 k-groups x (16 rows x 4 quants)
    set(kC2, 16, 64);
    if (layout == TileLayout::kRows64) {
        set(kC3, 16, 64);
        set(kC4, 16, 64);
    } else {
        set(kA16, 16, 16);    // Q6_K: half units of 16 elements
        set(kB16, 4, 64);
    }
    set(kA2, 16, 32);
    set(kB2, 8, 64);
    _tile_loadconfig(&cfg);
}

// The configuration stays loaded for the thread's life: reloading it for every panel cost more
// than the tile work of a small panel. (A thread's tile state is then saved on context switches,
// 8 KiB; the pool's threads live as long as the model.)
void ensure_tiles_configured(TileLayout layout) {
    thread_local TileLayout loaded = TileLayout::kNone;
    if (loaded != layout) configure_tiles(layout), loaded = layout;
}

inline __m512 neg(__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); }

// Unit sums C[16 act rows][16 weight rows] of unit u (halves: Q6_K's two 16-element halves).
// kSigned: from the signed quants (Q4_0 / Q5_0 / Q8_0), sums of (q - offset) x, bias included.
template <bool kSigned = false>
inline void unit_tile(const ActPack& a, int64_t m, const Panel& P, int64_t u, int32_t* c) {
    _tile_zero(kC);
    _tile_loadd(kA, a.q + m * a.K + 32 * u, a.K);
    _tile_loadd(kB, (kSigned ? (const uint8_t*)P.qs : P.q) + u * 512, 64);
    LLL_TDP(kSigned, kC, kA, kB);
    _tile_stored(kC, c, 64);
}

inline void half_tiles(const ActPack& a, int64_t m, const Panel& P, int64_t u, int32_t* c0, int32_t* c1) {
    _tile_zero(kC);
    _tile_zero(kC2);
    _tile_loadd(kA16, a.q + m * a.K + 32 * u, a.K);
    _tile_loadd(kB16, P.q + u * 512, 64);
    _tile_dpbsud(kC, kA16, kB16);
    _tile_loadd(kA16, a.q + m * a.K + 32 * u + 16, a.K);
    _tile_loadd(kB16, P.q + u * 512 + 256, 64);
    _tile_dpbsud(kC2, kA16, kB16);
    _tile_stored(kC, c0, 64);
    _tile_stored(kC2, c1, 64);
}

// Unit sums of two consecutive units at once, on separate tiles: the second unit's loads and
// dot product overlap the first one's store and fold (with one tile set each unit waited for the
// previous unit's store: the tile pipeline's latency, not its throughput, set the pace).
// kSigned: from P.qs with TDPBSSD (Q4_0 / Q5_0 / Q8_0), else from P.q with TDPBSUD.
template <bool kSigned>
inline void unit_tiles2(const ActPack& a, int64_t m, const Panel& P, int64_t u, int32_t* c0, int32_t* c1) {
    const uint8_t* b = kSigned ? (const uint8_t*)P.qs : P.q;
    _tile_zero(kC);
    _tile_zero(kC2);
    _tile_loadd(kA, a.q + m * a.K + 32 * u, a.K);
    _tile_loadd(kB, b + u * 512, 64);
    _tile_loadd(kA2, a.q + m * a.K + 32 * (u + 1), a.K);
    _tile_loadd(kB2, b + (u + 1) * 512, 64);
    LLL_TDP(kSigned, kC, kA, kB);
    LLL_TDP(kSigned, kC2, kA2, kB2);
    _tile_stored(kC, c0, 64);
    _tile_stored(kC2, c1, 64);
}

// The float step of one unit for 16 activation rows: kernel_legacy's operations (bseq_avx512.cpp)
// on the same exact integers (plus the min term for Q4_1 / Q5_1; for the other types the sums
// come from the signed quants, bias included).
template <bool kMin>
inline void fold_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, int64_t u, const int32_t* c,
                        __m512* acc) {
    const __m512 dw = _mm512_load_ps(P.d + 16 * u);
    for (int r = 0; r < 16; ++r) {
        const __m512i s = _mm512_load_si512(c + 16 * r);
        const int64_t i = (m + r) * nu + u;
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d[i])), acc[r]);
        if constexpr (kMin) acc[r] = _mm512_fmadd_ps(_mm512_load_ps(P.m + 16 * u), _mm512_set1_ps(a.s[i]), acc[r]);
    }
}

template <bool kMin>
void rows16_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, __m512* acc) {
    constexpr bool kSigned = !kMin;
    alignas(64) int32_t c0[16 * 16], c1[16 * 16];
    int64_t u = 0;
    for (; u + 2 <= nu; u += 2) {       // units fold in order: u, then u + 1
        unit_tiles2<kSigned>(a, m, P, u, c0, c1);
        fold_legacy<kMin>(P, nu, a, m, u, c0, acc);
        fold_legacy<kMin>(P, nu, a, m, u + 1, c1, acc);
    }
    if (u < nu) {
        unit_tile<kSigned>(a, m, P, u, c0);
        fold_legacy<kMin>(P, nu, a, m, u, c0, acc);
    }
}

template <bool kQ6>
void rows16_kquant(const Panel& P, int64_t nu, const ActPack& a, int64_t m, __m512* acc) {
    alignas(64) int32_t c0[16 * 16], c1[16 * 16];
    for (int64_t g = 0; g < nu / 8; ++g) {
        __m512i isum[16], aux[16];
        for (int r = 0; r < 16; ++r) isum[r] = aux[r] = _mm512_setzero_si512();
        for (int64_t u = 8 * g; u < 8 * g + 8; ++u) {
            if constexpr (kQ6) half_tiles(a, m, P, u, c0, c1);
            else unit_tile(a, m, P, u, c0);
            const __m512i sc0 = _mm512_load_si512(P.sc + 32 * u), pair = _mm512_load_si512(P.pair + 16 * u);
            const __m512i sc1 = kQ6 ? _mm512_load_si512(P.sc + 32 * u + 16) : sc0;
            for (int r = 0; r < 16; ++r) {   // integer terms: exact, any order
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(sc0, _mm512_load_si512(c0 + 16 * r)));
                if constexpr (kQ6) isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(sc1, _mm512_load_si512(c1 + 16 * r)));
                aux[r] = _mm512_dpwssd_epi32(aux[r], pair, _mm512_set1_epi32(a.bsum[(m + r) * nu + u]));
            }
        }
        const __m512 dw = _mm512_load_ps(P.d + 16 * g);
        const int64_t ng = nu / 8;
        for (int r = 0; r < 16; ++r) {      // same float operations as kernel_kquant
            const __m512 dx = _mm512_set1_ps(a.d[(m + r) * ng + g]);
            if constexpr (kQ6) isum[r] = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(aux[r], 5));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(dw, dx), acc[r]);
            if constexpr (!kQ6)
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(aux[r]),
                                         neg(_mm512_mul_ps(_mm512_load_ps(P.m + 16 * g), dx)), acc[r]);
        }
    }
}

// Unit sums of one unit for four blocks of 16 activation rows (x: the first block's unit, x16
// bytes from block to block) into c[block]: the weight tile b is loaded once, and four
// independent TDPs fill four tiles, which the tile pipeline overlaps. kSigned: TDPBSSD on the
// signed quants, else TDPBSUD.
template <bool kSigned>
inline void unit_sums_x4(const uint8_t* b, const int8_t* x, int64_t x16, int64_t ldx, int32_t (*c)[16 * 16]) {
    _tile_zero(kC);
    _tile_zero(kC2);
    _tile_zero(kC3);
    _tile_zero(kC4);
    _tile_loadd(kB, b, 64);
    _tile_loadd(kA, x, ldx);
    _tile_loadd(kA2, x + x16, ldx);
    LLL_TDP(kSigned, kC, kA, kB);
    LLL_TDP(kSigned, kC2, kA2, kB);
    _tile_loadd(kA, x + 2 * x16, ldx);
    _tile_loadd(kA2, x + 3 * x16, ldx);
    LLL_TDP(kSigned, kC3, kA, kB);
    LLL_TDP(kSigned, kC4, kA2, kB);
    _tile_stored(kC, c[0], 64);
    _tile_stored(kC2, c[1], 64);
    _tile_stored(kC3, c[2], 64);
    _tile_stored(kC4, c[3], 64);
}

// 64 activation rows (four blocks of 16) against one panel, legacy types: per unit, the four
// blocks' unit sums (unit_sums_x4), where one block's tile work used to wait out the previous
// unit's TDP and store; the float fold is then
// fold_legacy's, row by row and unit by unit in the same order, with the accumulators in memory
// (64 rows x 16 lanes do not fit in registers).
template <bool kMin>
void rows64_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, float* y, int64_t ldy, uint16_t lanes) {
    constexpr bool kSigned = !kMin;
    const uint8_t* b = kSigned ? (const uint8_t*)P.qs : P.q;
    const int8_t* x = a.q + m * a.K;
    const int64_t x16 = 16 * a.K;   // bytes from one block of 16 activation rows to the next
    alignas(64) int32_t c[4][16 * 16];
    alignas(64) float acc[64][16];   // written by unit 0 (no separate clearing pass)
    for (int64_t u = 0; u < nu; ++u) {
        unit_sums_x4<kSigned>(b + u * 512, x + 32 * u, x16, a.K, c);
        const __m512 dw = _mm512_load_ps(P.d + 16 * u);
        const __m512 mw = kMin ? _mm512_load_ps(P.m + 16 * u) : dw;
        for (int j = 0; j < 4; ++j) {     // fold_legacy's operations, block j of 16 rows
            const int64_t i0 = (m + 16 * j) * nu + u;
#pragma GCC unroll 16
            for (int r = 0; r < 16; ++r) {
                const int64_t i = i0 + r * nu;
                float* out = acc[16 * j + r];
                const __m512 prev = u == 0 ? _mm512_setzero_ps() : _mm512_load_ps(out);
                __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[j] + 16 * r)),
                                           _mm512_mul_ps(dw, _mm512_set1_ps(a.d[i])), prev);
                if constexpr (kMin) v = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[i]), v);
                _mm512_store_ps(out, v);
            }
        }
    }
    for (int r = 0; r < 64; ++r) _mm512_mask_storeu_ps(y + (m + r) * ldy, (__mmask16)lanes, _mm512_load_ps(acc[r]));
}

// The same for Q4_K / Q5_K: per unit, four unit-sum tiles scaled into 64 rows' integer sums
// (isum, in memory); per group of 8 units, the min terms (aux, vpdpwssd over the group's units)
// and rows16_kquant's float operations.
void rows64_k4(const Panel& P, int64_t nu, const ActPack& a, int64_t m, float* y, int64_t ldy, uint16_t lanes) {
    const int8_t* x = a.q + m * a.K;
    const int64_t x16 = 16 * a.K;
    const int64_t ng = nu / 8;
    alignas(64) int32_t c[4][16 * 16];
    alignas(64) int32_t isum[64][16];
    alignas(64) float acc[64][16];
    for (int64_t g = 0; g < ng; ++g) {
        for (int64_t u = 8 * g; u < 8 * g + 8; ++u) {
            unit_sums_x4<false>(P.q + u * 512, x + 32 * u, x16, a.K, c);
            const __m512i sc = _mm512_load_si512(P.sc + 32 * u);
            const bool first = u == 8 * g;
#pragma GCC unroll 16
            for (int r = 0; r < 64; ++r) {   // integer terms: exact, any order
                const __m512i v = _mm512_mullo_epi32(sc, _mm512_load_si512(c[r / 16] + 16 * (r % 16)));
                _mm512_store_si512(isum[r], first ? v : _mm512_add_epi32(_mm512_load_si512(isum[r]), v));
            }
        }
        __m512i pair[8];
        for (int k = 0; k < 8; ++k) pair[k] = _mm512_load_si512(P.pair + 16 * (8 * g + k));
        const __m512 dw = _mm512_load_ps(P.d + 16 * g), dmin = _mm512_load_ps(P.m + 16 * g);
        for (int r = 0; r < 64; ++r) {       // rows16_kquant's float operations
            const int32_t* bsum = a.bsum + (m + r) * nu + 8 * g;
            __m512i aux = _mm512_setzero_si512();
            for (int k = 0; k < 8; ++k) aux = _mm512_dpwssd_epi32(aux, pair[k], _mm512_set1_epi32(bsum[k]));
            const __m512 dx = _mm512_set1_ps(a.d[(m + r) * ng + g]);
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[r])), _mm512_mul_ps(dw, dx),
                                       g == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc[r]));
            v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(aux), neg(_mm512_mul_ps(dmin, dx)), v);
            _mm512_store_ps(acc[r], v);
        }
    }
    for (int r = 0; r < 64; ++r) _mm512_mask_storeu_ps(y + (m + r) * ldy, (__mmask16)lanes, _mm512_load_ps(acc[r]));
}

}  // namespace

bool amx_available() {
    static const bool ok = probe_amx();
    return ok;
}

int64_t amx_rows(GGMLType t, const Panel& P, int64_t nu, const ActPack& a, int64_t m, int64_t me,
                 float* y, int64_t ldy, uint16_t lanes) {
    if (!amx_available()) return m;
    if (t != GGMLType::Q6_K && me - m >= 64) {
        ensure_tiles_configured(TileLayout::kRows64);
        for (; m + 64 <= me; m += 64) {
            switch (t) {
                case GGMLType::Q4_1: case GGMLType::Q5_1: rows64_legacy<true>(P, nu, a, m, y, ldy, lanes); break;
                case GGMLType::Q4_K: case GGMLType::Q5_K: rows64_k4(P, nu, a, m, y, ldy, lanes); break;
                default: rows64_legacy<false>(P, nu, a, m, y, ldy, lanes); break;
            }
        }
    }
    if (m + 16 > me) return m;
    ensure_tiles_configured(TileLayout::kDefault);
    for (; m + 16 <= me; m += 16) {
        __m512 acc[16];
        for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
        switch (t) {
            case GGMLType::Q4_1: case GGMLType::Q5_1: rows16_legacy<true>(P, nu, a, m, acc); break;
            case GGMLType::Q4_K: case GGMLType::Q5_K: rows16_kquant<false>(P, nu, a, m, acc); break;
            case GGMLType::Q6_K: rows16_kquant<true>(P, nu, a, m, acc); break;
            default: rows16_legacy<false>(P, nu, a, m, acc); break;
        }
        for (int r = 0; r < 16; ++r) _mm512_mask_storeu_ps(y + (m + r) * ldy, (__mmask16)lanes, acc[r]);
    }
    return m;
}

}  // namespace bseq
}  // namespace lll

#else   // AMX not compiled in: the VNNI kernels do all rows

namespace lll {
namespace bseq {

bool amx_available() { return false; }

int64_t amx_rows(GGMLType, const Panel&, int64_t, const ActPack&, int64_t m, int64_t, float*, int64_t,
                 uint16_t) {
    return m;
}

}  // namespace bseq
}  // namespace lll
#endif
