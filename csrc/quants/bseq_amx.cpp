// bseq_amx.cpp — block-sequential matmul (bseq.h) on Intel AMX tiles.
//
// One TDPBSSD multiplies 16 activation rows (signed int8, a tile of 16 x 32 bytes read straight
// from the row-major activation quants) by one packed 32-element unit of 16 weight rows (the
// panel's signed copy of Q4_0 / Q5_0 / Q8_0 quants, q minus the type's offset, laid out as AMX's
// 8 x 64-byte B tile), giving the 16 x 16 exact unit sums at once, bias terms already subtracted.
// The float fold then runs with the same instructions, in the same order, as the VNNI kernels of
// bseq_avx512.cpp, so both paths give bit-identical results and which one runs (AMX for blocks of
// 64 and 16 rows where amx_pays: today Q8_0 only; VNNI for the rest) never shows in the output.
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
#define kC3 4
#define kC4 5
#define kA2 6     // a second unit (16-row kernel) or block (64-row kernel) in flight
#define kB2 7

void configure_tiles() {
    alignas(64) TileConfig cfg = {};
    cfg.palette = 1;
    auto set = [&](int t, int rows, int colsb) { cfg.rows[t] = (uint8_t)rows; cfg.colsb[t] = (uint16_t)colsb; };
    for (int t : {kC, kC2, kC3, kC4}) set(t, 16, 64);   // 16 activation rows x 16 weight rows, int32
    for (int t : {kA, kA2}) set(t, 16, 32);             // 16 activation rows x one 32-element unit
    for (int t : {kB, kB2}) set(t, 8, 64);              // one unit: 8 k-groups x (16 rows x 4 quants)
    // GCC does not count _tile_loadconfig as a read of cfg and may drop the stores above as dead
    // (it did so in llama.cpp's AMX code: benchmarks/llamacpp_source.py); the barrier keeps them.
    __asm__ __volatile__("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

// The configuration stays loaded for the thread's life: reloading it for every panel cost more
// than the tile work of a small panel. (A thread's tile state is then saved on context switches,
// 8 KiB; the pool's threads live as long as the model.)
void ensure_tiles_configured() {
    thread_local bool loaded = false;
    if (!loaded) configure_tiles(), loaded = true;
}

inline __m512 neg(__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); }

// Unit sums C[16 act rows][16 weight rows] of unit u: sums of (q - offset) x, bias included.
inline void unit_tile(const ActPack& a, int64_t m, const Panel& P, int64_t u, int32_t* c) {
    _tile_zero(kC);
    _tile_loadd(kA, a.q + m * a.K + 32 * u, a.K);
    _tile_loadd(kB, (const uint8_t*)P.qs + u * 512, 64);
    _tile_dpbssd(kC, kA, kB);
    _tile_stored(kC, c, 64);
}

// Unit sums of two consecutive units at once, on separate tiles: the second unit's loads and
// dot product overlap the first one's store and fold (with one tile set each unit waited for the
// previous unit's store: the tile pipeline's latency, not its throughput, set the pace).
inline void unit_tiles2(const ActPack& a, int64_t m, const Panel& P, int64_t u, int32_t* c0, int32_t* c1) {
    const uint8_t* b = (const uint8_t*)P.qs;
    _tile_zero(kC);
    _tile_zero(kC2);
    _tile_loadd(kA, a.q + m * a.K + 32 * u, a.K);
    _tile_loadd(kB, b + u * 512, 64);
    _tile_loadd(kA2, a.q + m * a.K + 32 * (u + 1), a.K);
    _tile_loadd(kB2, b + (u + 1) * 512, 64);
    _tile_dpbssd(kC, kA, kB);
    _tile_dpbssd(kC2, kA2, kB2);
    _tile_stored(kC, c0, 64);
    _tile_stored(kC2, c1, 64);
}

// The float step of one unit for 16 activation rows: kernel_legacy's operations (bseq_avx512.cpp)
// on the same exact integers (the sums come from the signed quants, bias included).
inline void fold_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, int64_t u, const int32_t* c,
                        __m512* acc) {
    const __m512 dw = _mm512_load_ps(P.d + 16 * u);
    for (int r = 0; r < 16; ++r) {
        const __m512i s = _mm512_load_si512(c + 16 * r);
        const int64_t i = (m + r) * nu + u;
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(a.d[i])), acc[r]);
    }
}

void rows16_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, __m512* acc) {
    alignas(64) int32_t c0[16 * 16], c1[16 * 16];
    int64_t u = 0;
    for (; u + 2 <= nu; u += 2) {       // units fold in order: u, then u + 1
        unit_tiles2(a, m, P, u, c0, c1);
        fold_legacy(P, nu, a, m, u, c0, acc);
        fold_legacy(P, nu, a, m, u + 1, c1, acc);
    }
    if (u < nu) {
        unit_tile(a, m, P, u, c0);
        fold_legacy(P, nu, a, m, u, c0, acc);
    }
}

// Unit sums of one unit for four blocks of 16 activation rows (x: the first block's unit, x16
// bytes from block to block) into c[block]: the weight tile b is loaded once, and four
// independent TDPBSSDs fill four tiles, which the tile pipeline overlaps.
inline void unit_sums_x4(const uint8_t* b, const int8_t* x, int64_t x16, int64_t ldx, int32_t (*c)[16 * 16]) {
    _tile_zero(kC);
    _tile_zero(kC2);
    _tile_zero(kC3);
    _tile_zero(kC4);
    _tile_loadd(kB, b, 64);
    _tile_loadd(kA, x, ldx);
    _tile_loadd(kA2, x + x16, ldx);
    _tile_dpbssd(kC, kA, kB);
    _tile_dpbssd(kC2, kA2, kB);
    _tile_loadd(kA, x + 2 * x16, ldx);
    _tile_loadd(kA2, x + 3 * x16, ldx);
    _tile_dpbssd(kC3, kA, kB);
    _tile_dpbssd(kC4, kA2, kB);
    _tile_stored(kC, c[0], 64);
    _tile_stored(kC2, c[1], 64);
    _tile_stored(kC3, c[2], 64);
    _tile_stored(kC4, c[3], 64);
}

// 64 activation rows (four blocks of 16) against one panel: per unit, the four blocks' unit sums
// (unit_sums_x4), where one block's tile work used to wait out the previous unit's TDP and store;
// the float fold is then fold_legacy's, row by row and unit by unit in the same order, with the
// accumulators in memory (64 rows x 16 lanes do not fit in registers).
void rows64_legacy(const Panel& P, int64_t nu, const ActPack& a, int64_t m, float* y, int64_t ldy, uint16_t lanes) {
    const uint8_t* b = (const uint8_t*)P.qs;
    const int8_t* x = a.q + m * a.K;
    const int64_t x16 = 16 * a.K;   // bytes from one block of 16 activation rows to the next
    alignas(64) int32_t c[4][16 * 16];
    alignas(64) float acc[64][16];   // written by unit 0 (no separate clearing pass)
    for (int64_t u = 0; u < nu; ++u) {
        unit_sums_x4(b + u * 512, x + 32 * u, x16, a.K, c);
        const __m512 dw = _mm512_load_ps(P.d + 16 * u);
        for (int j = 0; j < 4; ++j) {     // fold_legacy's operations, block j of 16 rows
            const int64_t i0 = (m + 16 * j) * nu + u;
#pragma GCC unroll 16
            for (int r = 0; r < 16; ++r) {
                const int64_t i = i0 + r * nu;
                float* out = acc[16 * j + r];
                const __m512 prev = u == 0 ? _mm512_setzero_ps() : _mm512_load_ps(out);
                _mm512_store_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[j] + 16 * r)),
                                                     _mm512_mul_ps(dw, _mm512_set1_ps(a.d[i])), prev));
            }
        }
    }
    for (int r = 0; r < 64; ++r) _mm512_mask_storeu_ps(y + (m + r) * ldy, (__mmask16)lanes, _mm512_load_ps(acc[r]));
}

}  // namespace

bool amx_available() {
    static const bool ok = probe_amx();
    return ok;
}

// Measured on a 2-core Sapphire Rapids class VM (stop 33). Per matrix (4864 x 1024 weights, GOP/s
// at 16 / 64 / 512 rows) the VNNI pair kernels, which read two panels per pass, beat the tile
// kernels by 20-60% on Q4_1, Q5_1 and the K-quants at every row count and by 10-15% on the signed
// types at 16 rows; Q4_0 / Q5_0 / Q8_0 at 64 rows and more tie or gain alone. Whole prompts
// disagree for Q5_0: Qwen2.5's pp512, mostly Q5_0, ran 4.5% slower with its Q5_0 on tiles (861
// against 900 t/s, four alternations). So AMX keeps only Q8_0 blocks of 64 rows and more
// (+5-10% at 512 rows alone); the rest runs the VNNI kernels, bit for bit the same results.
bool amx_pays(GGMLType t, int64_t rows) {
    return t == GGMLType::Q8_0 && rows >= 64;
}

int64_t amx_rows(GGMLType t, const Panel& P, int64_t nu, const ActPack& a, int64_t m, int64_t me,
                 float* y, int64_t ldy, uint16_t lanes) {
    if (!amx_available()) return m;
    ensure_tiles_configured();
    for (; m + 64 <= me; m += 64) rows64_legacy(P, nu, a, m, y, ldy, lanes);
    for (; m + 16 <= me; m += 16) {
        __m512 acc[16];
        for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
        rows16_legacy(P, nu, a, m, acc);
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
bool amx_pays(GGMLType, int64_t) { return false; }

int64_t amx_rows(GGMLType, const Panel&, int64_t, const ActPack&, int64_t m, int64_t, float*, int64_t,
                 uint16_t) {
    return m;
}

}  // namespace bseq
}  // namespace lll
#endif
