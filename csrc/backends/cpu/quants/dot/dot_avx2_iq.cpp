// dot_avx2_iq.cpp — AVX2 tile kernels of the low-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) with Q8_K activations. Scalar reference: dot_scalar.cpp's dot_iq_lowbit.
//
// A weight group of 32 is decoded once per tile (iq_lowbit.h's Group32: grid bytes, sign bits,
// half multipliers) and used for each of the tile's activation rows: the grid bytes (unsigned,
// <= 62) times the activations with the weight's sign applied (vpsignb), pair sums by vpmaddubsw
// (<= 2 * 62 * 127, no saturation), times the half's multiplier by vpmaddwd into int32 lanes.
// A super-block's integer sum is exact and is scaled exactly as the scalar reference scales it,
// so every level gives the scalar result bit for bit.
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

}  // namespace avx2_iq_impl
using namespace avx2_iq_impl;

LLL_DEFINE_KERNEL_SET(avx2_iq2_xxs, (make_tile_set<IqTile<iqlow::IQ2XXS>::T, 1, 4>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_iq2_xs, (make_tile_set<IqTile<iqlow::IQ2XS>::T, 1, 4>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_iq2_s, (make_tile_set<IqTile<iqlow::IQ2S>::T, 1, 4>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_iq3_xxs, (make_tile_set<IqTile<iqlow::IQ3XXS>::T, 1, 4>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_iq3_s, (make_tile_set<IqTile<iqlow::IQ3S>::T, 1, 4>(Isa::AVX2)))

}  // namespace kern
}  // namespace lll

#endif
