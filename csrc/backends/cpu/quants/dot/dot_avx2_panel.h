// dot_avx2_panel.h — the AVX2 unit kernels (KernelSet::unit) of the tile-kernel types whose
// prompts pay for unpacking weights once: IQ4_NL (dot_avx2.cpp) and the low-bit i-quants
// (dot_avx2_iq.cpp).
//
// A unit unpacks 8 weight rows at a time into a panel whose vector j holds, in lane r, row r's
// (unpacked, signed) quants 4j..4j+3 of a block: an 8 x 8 dword transpose of the rows' blocks.
// One broadcast activation dword against vector j then gives 8 rows' sums of those 4 products
// in 8 int32 lanes, and every activation row of the unit runs against the panel while it is
// in L1 / L2. Each type's panel policy P keeps its tiles' float operations pair for pair, so
// the unit's results are the tiles' bits (the types stay batch invariant).
#pragma once
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX2
#include <immintrin.h>
#include <string.h>

#include <algorithm>
#include <vector>

namespace lll {
namespace kern {
namespace avx2_panel {

constexpr int kPanelRows = 8;

// v[r] dword j -> v[j] dword r.
inline void transpose8x8_epi32(__m256i (&v)[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);       // dwords 0 1 | 4 5 of rows 2i, 2i + 1
        t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);   // dwords 2 3 | 6 7
    }
    for (int h = 0; h < 2; ++h)   // rows 4h .. 4h + 3
        for (int i = 0; i < 2; ++i) {
            u[4 * h + 2 * i] = _mm256_unpacklo_epi64(t[4 * h + i], t[4 * h + i + 2]);       // dword 2i | 2i + 4
            u[4 * h + 2 * i + 1] = _mm256_unpackhi_epi64(t[4 * h + i], t[4 * h + i + 2]);   // 2i + 1 | 2i + 5
        }
    for (int j = 0; j < 4; ++j) {
        v[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        v[j + 4] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}

// The first nr lanes of v to y.
inline void store_rows(float* y, __m256 v, int nr) {
    if (nr == kPanelRows) {
        _mm256_storeu_ps(y, v);
    } else {
        alignas(32) float tmp[kPanelRows];
        _mm256_store_ps(tmp, v);
        memcpy(y, tmp, nr * sizeof(float));
    }
}

// The unit kernel of panel policy P:
//   P::Block    one weight block of 8 rows, unpacked
//   P::kElems   elements per weight block
//   P::kChunk   weight blocks per chunk: two panels' chunks stay in L1 while every activation
//               row of the unit runs against them
//   P::Acc      an activation row's float accumulators for one panel (zero-initialized)
//   P::unpack(w, ws, nr, b0, b1, out)  blocks [b0, b1) of rows w[0 .. nr) (nr <= 8; the others
//                                      read as zero) to out[0 .. b1 - b0)
//   P::run(panel, b0, b1, x, acc)      blocks [b0, b1) of activation row x into acc
//   P::finish(acc, nr, y)              y[0 .. nr) from the accumulators after the last block
// The float accumulators wait in memory between chunks (exactly), so each pair still folds its
// blocks in order. Two panels (matmul's run of 16 weight rows) at a time.
template <class P>
void panel_unit(int64_t k, const uint8_t* w, size_t ws, int64_t n, const uint8_t* x, size_t xs, int64_t m,
                float* y, int64_t ldy) {
    constexpr int kPanels = 2;
    const int64_t nb = k / P::kElems;
    // per thread: the threads' units overlap
    thread_local std::vector<typename P::Block> panels(kPanels * P::kChunk);
    thread_local std::vector<typename P::Acc> accs;
    if ((int64_t)accs.size() < kPanels * m) accs.resize(kPanels * m);
    for (int64_t n0 = 0; n0 < n; n0 += kPanels * kPanelRows) {
        int nr[kPanels];
        for (int p = 0; p < kPanels; ++p) nr[p] = (int)std::clamp<int64_t>(n - n0 - p * kPanelRows, 0, kPanelRows);
        std::fill(accs.begin(), accs.begin() + kPanels * m, typename P::Acc{});
        for (int64_t b0 = 0; b0 < nb; b0 += P::kChunk) {
            const int64_t b1 = std::min<int64_t>(nb, b0 + P::kChunk);
            for (int p = 0; p < kPanels && nr[p] > 0; ++p)
                P::unpack(w + (n0 + p * kPanelRows) * ws, ws, nr[p], b0, b1, panels.data() + p * P::kChunk);
            for (int64_t c = 0; c < m; ++c)
                for (int p = 0; p < kPanels && nr[p] > 0; ++p)
                    P::run(panels.data() + p * P::kChunk, b0, b1, x + c * xs, accs[kPanels * c + p]);
        }
        for (int64_t c = 0; c < m; ++c)
            for (int p = 0; p < kPanels && nr[p] > 0; ++p)
                P::finish(accs[kPanels * c + p], nr[p], y + c * ldy + n0 + p * kPanelRows);
    }
}

}  // namespace avx2_panel
}  // namespace kern
}  // namespace lll

#endif
