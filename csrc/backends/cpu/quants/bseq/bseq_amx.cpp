// bseq_amx.cpp — block-sequential matmul (bseq.h) on Intel AMX tiles.
//
// One TDPBSSD multiplies 16 activation rows (signed int8, a tile of 16 x 32 bytes read straight
// from the row-major activation quants) by one packed 32-element unit of 16 weight rows (the
// panel's signed copy of Q4_0 / Q5_0 / Q8_0 quants, q minus the type's offset, laid out as AMX's
// 8 x 64-byte B tile), giving the 16 x 16 exact unit sums at once, bias terms already subtracted.
// The float fold then runs with the same instructions, in the same order, as the VNNI kernels of
// bseq_avx512.cpp, so both paths give bit-identical results and which one runs never shows in the
// output: today AMX takes Q8_0 only, batches of 16-63 rows straight from the repacked panels
// (amx_reads_repacked) and blocks of 64 rows and more from packed panels (amx_pays); VNNI the rest.
#include "backends/cpu/quants/bseq/bseq_panel.h"
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX512 && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

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


// ---- Q8_0 straight from the repacked weight ---------------------------------------------------
// A repacked Q8_0 panel holds, per unit, the 16 rows' signed quants in exactly the B-tile layout
// (8 k-groups x 16 rows x 4 quants: pack_q8_0 records its transposes before the unsigned shift),
// then the 16 rows' f16 scales. So TDPBSSD takes the unit from the weight as it lies, with no
// panel unpacking: the decode-sized batches (16-63 rows), where unpacking a panel cost as much
// as the tile work, run 1.6 times as fast as the VNNI pair kernels at 16 rows on the 262,144 x
// 640 output matrix of Gemma3. Each pass takes kGroup panels: one activation tile feeds four
// TDPBSSDs, and the tile work of unit u + 1 is issued before the fold of unit u, so the fold
// never waits for the tile stores it reads.

constexpr int kGroup = 4;                                       // panels per pass
constexpr int64_t kTailReplayRows = 3;   // rows past the blocks of 16 sent to replay_panels (measured at 1-3)
constexpr size_t kArenaUnit = kPanel * sizeof(block_q8_0);      // 512 quant bytes, 32 scale bytes

// Unit sums of one unit for G panels (pb bytes apart) x 16 activation rows into c[0..G).
template <int G>
inline void arena_unit_sums(const uint8_t* unit, size_t pb, const int8_t* xu, int64_t ldx, int32_t (*c)[256]) {
    _tile_zero(kC);
    if constexpr (G > 1) _tile_zero(kC2);
    if constexpr (G > 2) _tile_zero(kC3);
    if constexpr (G > 3) _tile_zero(kC4);
    _tile_loadd(kA, xu, ldx);
    _tile_loadd(kB, unit, 64);
    if constexpr (G > 1) _tile_loadd(kB2, unit + pb, 64);
    _tile_dpbssd(kC, kA, kB);
    if constexpr (G > 1) _tile_dpbssd(kC2, kA, kB2);
    if constexpr (G > 2) {
        _tile_loadd(kB, unit + 2 * pb, 64);
        _tile_dpbssd(kC3, kA, kB);
    }
    if constexpr (G > 3) {
        _tile_loadd(kB2, unit + 3 * pb, 64);
        _tile_dpbssd(kC4, kA, kB2);
    }
    _tile_stored(kC, c[0], 64);
    if constexpr (G > 1) _tile_stored(kC2, c[1], 64);
    if constexpr (G > 2) _tile_stored(kC3, c[2], 64);
    if constexpr (G > 3) _tile_stored(kC4, c[3], 64);
}

// G panels from `pan` x `rows` (<= 16) activation rows x (ldx apart) with scales dx[r * nu + u]:
// acc[j][r] = row r's outputs of panel j, folded unit by unit as fold_legacy does. With
// `prefetch`, the next pass's panels are fetched into L2 one unit at a time.
template <int G>
void arena_pass(const uint8_t* pan, size_t pb, int64_t nu, const int8_t* x, int64_t ldx, const float* dx,
                int rows, bool prefetch, float (*acc)[16][16]) {
    alignas(64) int32_t c[2][kGroup][256];
    arena_unit_sums<G>(pan, pb, x, ldx, c[0]);
    for (int64_t u = 0; u < nu; ++u) {
        if (prefetch)
            for (int j = 0; j < G; ++j)
                for (size_t o = 0; o < kArenaUnit; o += 64) __builtin_prefetch(pan + (G + j) * pb + u * kArenaUnit + o, 0, 1);
        if (u + 1 < nu) arena_unit_sums<G>(pan + (u + 1) * kArenaUnit, pb, x + 32 * (u + 1), ldx, c[(u + 1) & 1]);
        const int32_t (*cu)[256] = c[u & 1];
        for (int j = 0; j < G; ++j) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(pan + j * pb + u * kArenaUnit + 512)));
#pragma GCC unroll 16
            for (int r = 0; r < rows; ++r) {
                const __m512 prev = u == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc[j][r]);
                const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(cu[j] + 16 * r));
                _mm512_store_ps(acc[j][r], _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(dx[r * nu + u])), prev));
            }
        }
    }
}

}  // namespace

bool amx_available() {
    static const bool ok = probe_amx();
    return ok;
}

// Measured on a 2-core Sapphire Rapids class VM. Per matrix (4864 x 1024 weights, GOP/s
// at 16 / 64 / 512 rows) the VNNI pair kernels, which read two panels per pass, beat the tile
// kernels by 20-60% on Q4_1, Q5_1 and the K-quants at every row count and by 10-15% on the signed
// types at 16 rows; Q4_0 / Q5_0 / Q8_0 at 64 rows and more tie or gain alone. Whole prompts
// disagree for Q5_0: Qwen2.5's pp512, mostly Q5_0, ran 4.5% slower with its Q5_0 on tiles (861
// against 900 t/s, four alternations). So AMX keeps only Q8_0 blocks of 64 rows and more
// (+5-10% at 512 rows alone); the rest runs the VNNI kernels, bit for bit the same results.
bool amx_pays(GGMLType t, int64_t rows) {
    return t == GGMLType::Q8_0 && rows >= 64;
}

// The same machine, 2 threads (ms, VNNI pair kernels -> tiles from the repacked panels):
// Gemma3's 262,144 x 640 output matrix at 16 rows 10.1 -> 6.3, at 32 rows 15.9 -> 12.5; 4864 x
// 1024 at 16 / 48 rows 0.26 -> 0.19 / 0.54 -> 0.48. From 64 rows on the packed 64-row tiles
// (amx_pays) tie with them, and at 512 rows x 49,152 they are faster (50 against 63 ms).
bool amx_reads_repacked(GGMLType t, int64_t rows) {
    return t == GGMLType::Q8_0 && rows >= 16 && rows < 64;
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


int64_t amx_q8_0_repacked(const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                          float* Y, int64_t ldy) {
    if (!amx_available()) return 0;
    ensure_tiles_configured();
    const int64_t nu = a.K / 32, full = a.M / 16 * 16;
    const size_t pb = kPanel * ws;
    // The rows past the last 16: up to kTailReplayRows of them go through the VNNI fold, group by
    // group while its panels are still in the caches (16 decode rows and one prompt's last row
    // were a 17-row head that cost two tile passes); more, as a zero-padded block of 16 (their
    // sums are computed and dropped).
    const bool tail_vnni = a.M - full <= kTailReplayRows;
    const int64_t tiled = tail_vnni ? full : a.M;
    thread_local std::vector<int8_t> xpad;
    thread_local std::vector<float> dpad;
    if (!tail_vnni) {
        xpad.assign((size_t)(16 * a.K), 0);
        dpad.assign((size_t)(16 * nu), 0.0f);
        std::copy(a.q + full * a.K, a.q + a.M * a.K, xpad.begin());
        std::copy(a.d + full * nu, a.d + a.M * nu, dpad.begin());
    }
    alignas(64) float acc[kGroup][16][16];
    for (int64_t p = n0; p < n1; p += kGroup * kPanel) {
        const int G = (int)std::min<int64_t>(kGroup, (n1 - p + kPanel - 1) / kPanel);
        const uint8_t* pan = W + p / kPanel * pb;
        for (int64_t m = 0; m < tiled; m += 16) {
            const int rows = (int)std::min<int64_t>(16, a.M - m);
            const int8_t* x = m < full ? a.q + m * a.K : xpad.data();
            const float* dx = m < full ? a.d + m * nu : dpad.data();
            switch (G) {
                case 4: arena_pass<4>(pan, pb, nu, x, a.K, dx, rows, m == 0, acc); break;
                case 3: arena_pass<3>(pan, pb, nu, x, a.K, dx, rows, m == 0, acc); break;
                case 2: arena_pass<2>(pan, pb, nu, x, a.K, dx, rows, m == 0, acc); break;
                default: arena_pass<1>(pan, pb, nu, x, a.K, dx, rows, m == 0, acc); break;
            }
            for (int j = 0; j < G; ++j) {
                const int64_t n = p + j * kPanel;
                const __mmask16 lanes = (__mmask16)((1u << std::min<int64_t>(kPanel, N - n)) - 1);
                for (int r = 0; r < rows; ++r) _mm512_mask_storeu_ps(Y + (m + r) * ldy + n, lanes, _mm512_load_ps(acc[j][r]));
            }
        }
        if (tiled < a.M) replay_panels(GGMLType::Q8_0, W, ws, N, p, std::min<int64_t>(n1, p + G * kPanel), a, tiled, Y, ldy);
    }
    return a.M;
}

}  // namespace bseq
}  // namespace lll

#else   // AMX not compiled in: the VNNI kernels do all rows

namespace lll {
namespace bseq {

bool amx_available() { return false; }
bool amx_pays(GGMLType, int64_t) { return false; }
bool amx_reads_repacked(GGMLType, int64_t) { return false; }

int64_t amx_rows(GGMLType, const Panel&, int64_t, const ActPack&, int64_t m, int64_t, float*, int64_t,
                 uint16_t) {
    return m;
}

int64_t amx_q8_0_repacked(const uint8_t*, size_t, int64_t, int64_t, int64_t, const ActPack&, float*, int64_t) {
    return 0;
}

}  // namespace bseq
}  // namespace lll
#endif
