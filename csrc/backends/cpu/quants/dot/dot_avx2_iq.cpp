// dot_avx2_iq.cpp — AVX2 tile kernels of the low-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) with Q8_K activations. Scalar reference: dot_scalar.cpp's dot_iq_lowbit.
//
// A weight group of 32 is decoded once per tile (iq_lowbit.h's Group32: grid bytes, sign bits,
// half multipliers) and used for each of the tile's activation rows: the grid bytes (unsigned,
// <= 62) times the activations with the weight's sign applied (vpsignb), pair sums by vpmaddubsw
// (<= 2 * 62 * 127, no saturation), times the half's multiplier by vpmaddwd into int32 lanes.
// A super-block's integer sum is exact and is scaled exactly as the scalar reference scales it,
// so every level gives the scalar result bit for bit.
#include "backends/cpu/quants/dot/dot_avx2_panel.h"
#include "backends/cpu/quants/dot/dot_impl.h"
#include "backends/cpu/quants/dot/iq_lowbit.h"

#if LLL_BUILD_AVX2
#include <immintrin.h>

namespace lll {
namespace kern {
// Named, not anonymous (see dot_avx2.cpp): tiles of two files must not merge.
namespace avx2_iq_impl {

inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// +1 / -1 per byte from 32 sign bits (bit j set: byte j is -1).
inline __m256i sign_bytes(uint32_t signs) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)signs), spread);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_or_si256(neg, _mm256_set1_epi8(1));
}

// One decoded group of 32 in registers.
struct GroupRegs {
    __m256i grid, sign, mult;
    explicit GroupRegs(const iqlow::Group32& g)
        : grid(_mm256_setr_epi64x((long long)g.grid[0], (long long)g.grid[1], (long long)g.grid[2],
                                  (long long)g.grid[3])),
          sign(sign_bytes(g.signs)),
          mult(_mm256_set_m128i(_mm_set1_epi16((short)g.mult[1]), _mm_set1_epi16((short)g.mult[0]))) {}
    // int32 lanes summing to the group's exact integer dot product with 32 activations.
    __m256i dot(const int8_t* q8) const {
        const __m256i q = _mm256_loadu_si256((const __m256i*)q8);
        return _mm256_madd_epi16(_mm256_maddubs_epi16(grid, _mm256_sign_epi8(q, sign)), mult);
    }
};

template <class Type>
struct IqTile {
    template <int R, int C>
    struct T {
        static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
            typedef typename Type::Block Block;
            for (int r = 0; r < R; ++r) {
                const Block* wb = (const Block*)(w + r * ws);
                float sumf[C] = {};
                for (int64_t i = 0; i < k / QK_K; ++i) {
                    __m256i acc[C];
                    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_si256();
                    for (int ib = 0; ib < QK_K / 32; ++ib) {
                        iqlow::Group32 g;
                        Type::group(wb[i], ib, g);
                        const GroupRegs regs(g);
                        for (int c = 0; c < C; ++c) {
                            const block_q8_K* xb = (const block_q8_K*)(x + c * xs) + i;
                            acc[c] = _mm256_add_epi32(acc[c], regs.dot(xb->qs + 32 * ib));
                        }
                    }
                    const float dw = _cvtsh_ss(wb[i].d);
                    for (int c = 0; c < C; ++c) {
                        const block_q8_K* xb = (const block_q8_K*)(x + c * xs) + i;
                        sumf[c] = iqlow::add_scaled(sumf[c], dw, xb->d, hsum_i32(acc[c]));
                    }
                }
                for (int c = 0; c < C; ++c) y[c * ldy + r] = Type::kFinal * sumf[c];
            }
        }
    };
};

// The unit kernel (dot_avx2_panel.h) for prompts: the tiles decode a group of 32 once per tile
// of 4 activation rows, and decoding (table lookups, sign expansion) costs more than the dot
// products. The panel holds each row's decoded group as signed bytes (grid x sign, |w| <= 62)
// beside their magnitudes and its halves' multipliers; two vpmaddubsw pair sums of one half
// add in int16 (<= 4 * 62 * 127 < 2^15) before vpmaddwd by the multiplier. A super-block's
// integer sum is exact in any order, and it is scaled as the tiles scale it (fmaf(d * d8, isum,
// sum), then kFinal), so the unit gives the tiles' bits.
template <class Type>
struct IqPanel {
    struct Block {
        __m256i q[64], aq[64];   // q[8g + j] lane r: row r's weights 32g + 4j .. 32g + 4j + 3; aq = |q|
        __m256i mult[16];        // mult[2g + h] lane r: row r's multiplier of half h of group g, as two int16
        __m256 d;                // lane r: row r's scale (0 past the rows)
    };
    struct Acc { __m256 sum; };   // lane r: row r's sum over the super-blocks so far
    static constexpr int kElems = QK_K, kChunk = 1;   // 2 x 4640 bytes of panels

    static void unpack_group(const uint8_t* w, size_t ws, int nr, int64_t b, int g, Block& out) {
        __m256i v[avx2_panel::kPanelRows];
        alignas(32) int32_t mult[2][avx2_panel::kPanelRows] = {};
        for (int r = 0; r < avx2_panel::kPanelRows; ++r) {
            v[r] = _mm256_setzero_si256();
            if (r >= nr) continue;
            iqlow::Group32 grp;
            Type::group(((const typename Type::Block*)(w + r * ws))[b], g, grp);
            const __m256i grid = _mm256_setr_epi64x((long long)grp.grid[0], (long long)grp.grid[1],
                                                    (long long)grp.grid[2], (long long)grp.grid[3]);
            v[r] = _mm256_sign_epi8(grid, sign_bytes(grp.signs));
            for (int h = 0; h < 2; ++h) mult[h][r] = (int32_t)(grp.mult[h] * 0x10001u);
        }
        avx2_panel::transpose8x8_epi32(v);
        for (int j = 0; j < 8; ++j) {
            out.q[8 * g + j] = v[j];
            out.aq[8 * g + j] = _mm256_sign_epi8(v[j], v[j]);
        }
        for (int h = 0; h < 2; ++h) out.mult[2 * g + h] = _mm256_load_si256((const __m256i*)mult[h]);
    }

    static void unpack(const uint8_t* w, size_t ws, int nr, int64_t b0, int64_t b1, Block* out) {
        for (int64_t b = b0; b < b1; ++b) {
            alignas(32) float d[avx2_panel::kPanelRows] = {};
            for (int r = 0; r < nr; ++r) d[r] = _cvtsh_ss(((const typename Type::Block*)(w + r * ws))[b].d);
            out[b - b0].d = _mm256_load_ps(d);
            for (int g = 0; g < QK_K / 32; ++g) unpack_group(w, ws, nr, b, g, out[b - b0]);
        }
    }

    // 8 rows' sums of the 4 products of panel vector i with the activations q8[0..3].
    static __m256i dot4(const Block& pb, int i, const int8_t* q8) {
        int32_t xj;
        memcpy(&xj, q8, 4);
        return _mm256_maddubs_epi16(pb.aq[i], _mm256_sign_epi8(_mm256_set1_epi32(xj), pb.q[i]));
    }

    static void run(const Block* panel, int64_t b0, int64_t b1, const uint8_t* x, Acc& a) {
        __m256 sum = a.sum;
        for (int64_t b = b0; b < b1; ++b) {
            const Block& pb = panel[b - b0];
            const block_q8_K* xb = (const block_q8_K*)x + b;
            __m256i isum = _mm256_setzero_si256();
            for (int h2 = 0; h2 < 16; ++h2) {   // half h2 % 2 of group h2 / 2: panel vectors 4 h2 .. 4 h2 + 3
                const int8_t* q8 = xb->qs + 16 * h2;
                const __m256i p01 = _mm256_add_epi16(dot4(pb, 4 * h2, q8), dot4(pb, 4 * h2 + 1, q8 + 4));
                const __m256i p23 = _mm256_add_epi16(dot4(pb, 4 * h2 + 2, q8 + 8), dot4(pb, 4 * h2 + 3, q8 + 12));
                isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p01, pb.mult[h2]),
                                                               _mm256_madd_epi16(p23, pb.mult[h2])));
            }
            sum = _mm256_fmadd_ps(_mm256_mul_ps(pb.d, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(isum), sum);
        }
        a.sum = sum;
    }

    static void finish(const Acc& a, int nr, float* y) {
        avx2_panel::store_rows(y, _mm256_mul_ps(_mm256_set1_ps(Type::kFinal), a.sum), nr);
    }
};

// Up to 4 activation rows (one 1x4 tile wide) the tiles win; from 5 the unit does (ms per row,
// IQ2_XS, N = 896, K = 4864, 1 thread, Zen 3: 0.23 / 0.26 at 4 rows, 0.31 / 0.23 at 5,
// 2026-12-06).
constexpr int kIqUnitMinRows = 5;

template <class Type>
KernelSet make_iq_set() {
    KernelSet ks = make_tile_set<IqTile<Type>::template T, 1, 4>(Isa::AVX2);
    ks.unit = &avx2_panel::panel_unit<IqPanel<Type>>;
    ks.unit_min_rows = kIqUnitMinRows;
    return ks;
}

}  // namespace avx2_iq_impl
using namespace avx2_iq_impl;

LLL_DEFINE_KERNEL_SET(avx2_iq2_xxs, make_iq_set<iqlow::IQ2XXS>())
LLL_DEFINE_KERNEL_SET(avx2_iq2_xs, make_iq_set<iqlow::IQ2XS>())
LLL_DEFINE_KERNEL_SET(avx2_iq2_s, make_iq_set<iqlow::IQ2S>())
LLL_DEFINE_KERNEL_SET(avx2_iq3_xxs, make_iq_set<iqlow::IQ3XXS>())
LLL_DEFINE_KERNEL_SET(avx2_iq3_s, make_iq_set<iqlow::IQ3S>())

}  // namespace kern
}  // namespace lll

#endif
