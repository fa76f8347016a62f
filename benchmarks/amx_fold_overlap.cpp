// amx_fold_overlap.cpp — does AMX tile work overlap the AVX-512 float fold on this machine?
//
// The shape is a Q4_1 prompt matmul's inner step (quants/bseq_amx.cpp's tile kernels): per
// 32-element unit, one TDPBSSD gives 16 activation rows x 16 weight rows of exact unit sums,
// stored to memory; the fold of bseq.h then turns each row's 16 sums into floats and adds
// fma(sum, d_w * d_x, acc) and fma(m_w, s_x, acc). The activations are 512 rows x 576 (SmolLM2's
// width), walked 16 rows at a time as the kernels walk them; the tile work of unit u + 1 is issued
// before the fold of unit u. Three timings per unit tile (16 x 16 x 32 multiply-adds): the tile
// work alone, the fold alone (reading stale sums), and both. If the machine overlapped them,
// "both" would sit near the larger of the two; on the Sapphire Rapids class VM (2026-12-06) it is
// their sum (17 + 22 -> 41-44 ns), so AMX cannot run per-32-element-scaled types much faster
// than the VNNI kernels, whose own dot products the fold has to share the vector ports with.
//
//     g++ -O2 -march=native benchmarks/amx_fold_overlap.cpp -o /tmp/amx_fold_overlap && /tmp/amx_fold_overlap
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__) || !defined(__AVX512F__)
#error "amx_fold_overlap needs AMX-INT8 and AVX-512 (build with -march=native on such a CPU)"
#endif

namespace {

struct TileConfig {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

constexpr int kRows = 512, kK = 576, kUnits = kK / 32, kPanels = 96;   // 96 panels: 1536 weight rows

enum Mode { kTiles = 1, kFold = 2, kBoth = 3 };

struct Data {
    int8_t* act;     // [kRows][kK]
    int8_t* panel;   // [kUnits][8][64]: one panel's B tiles, reused for every panel
    float *dx, *sx;  // [kRows][kUnits]
    float *dw, *mw;  // [kUnits][16]
    float* y;        // [kRows][kPanels * 16]
};

template <class T>
T* filled(size_t n, T v) {
    T* p = static_cast<T*>(aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
    for (size_t i = 0; i < n; ++i) p[i] = v;
    return p;
}

void configure_tiles() {
    alignas(64) TileConfig cfg = {};
    cfg.palette = 1;
    cfg.rows[0] = 16, cfg.colsb[0] = 64;   // C: 16 x 16 int32
    cfg.rows[1] = 16, cfg.colsb[1] = 32;   // A: 16 activation rows x 32 quants
    cfg.rows[2] = 8, cfg.colsb[2] = 64;    // B: 8 k-groups x (16 weight rows x 4 quants)
    __asm__ __volatile__("" : : "r"(&cfg) : "memory");   // GCC may drop the stores otherwise
    _tile_loadconfig(&cfg);
}

// One pass over all panels and row blocks; returns seconds.
double run(const Data& d, int mode) {
    alignas(64) int32_t c[2][256] = {};
    const auto t0 = std::chrono::steady_clock::now();
    for (int p = 0; p < kPanels; ++p)
        for (int m = 0; m < kRows; m += 16) {
            const int8_t* x = d.act + m * kK;
            auto tile = [&](int u) {
                _tile_zero(0);
                _tile_loadd(1, x + 32 * u, kK);
                _tile_loadd(2, d.panel + 512 * u, 64);
                _tile_dpbssd(0, 1, 2);
                _tile_stored(0, c[u & 1], 64);
            };
            __m512 acc[16];
            for (auto& a : acc) a = _mm512_setzero_ps();
            if (mode & kTiles) tile(0);
            for (int u = 0; u < kUnits; ++u) {
                if ((mode & kTiles) && u + 1 < kUnits) tile(u + 1);
                if (!(mode & kFold)) continue;
                const __m512 dw = _mm512_load_ps(d.dw + 16 * u), mw = _mm512_load_ps(d.mw + 16 * u);
#pragma GCC unroll 16
                for (int r = 0; r < 16; ++r) {
                    const int i = (m + r) * kUnits + u;
                    const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c[u & 1] + 16 * r));
                    acc[r] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(d.dx[i])), acc[r]);
                    acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(d.sx[i]), acc[r]);
                }
            }
            for (int r = 0; r < 16; ++r) _mm512_storeu_ps(d.y + ((size_t)(m + r) * kPanels + p) * 16, acc[r]);
        }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;   // Linux arch_prctl: ask for the tile state
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) != 0) {
        std::fprintf(stderr, "the kernel did not grant AMX tile state\n");
        return 1;
    }
    configure_tiles();
    const Data d{filled<int8_t>((size_t)kRows * kK, 1), filled<int8_t>((size_t)kUnits * 512, 1),
                 filled<float>((size_t)kRows * kUnits, 1e-3f), filled<float>((size_t)kRows * kUnits, 1e-4f),
                 filled<float>((size_t)kUnits * 16, 0.5f), filled<float>((size_t)kUnits * 16, 0.25f),
                 filled<float>((size_t)kRows * kPanels * 16, 0.0f)};
    const double unit_tiles = (double)kPanels * (kRows / 16) * kUnits;
    for (int mode : {kTiles, kFold, kBoth}) {
        double best = 1e9;
        for (int rep = 0; rep < 5; ++rep) best = std::min(best, run(d, mode));
        std::printf("%-11s %5.1f ns per unit tile, %4.0f G int8 ops/s\n",
                    mode == kTiles ? "tiles only" : mode == kFold ? "fold only" : "both", best / unit_tiles * 1e9,
                    unit_tiles * 16 * 16 * 32 * 2 / best / 1e9);
    }
    return 0;
}
