// ggml_q4k.cpp — Q4_K weights times f32 activations in llama.cpp's exact float order
// (ggml_order.h; the "llama.cpp numerics" mode, model.h: Numerics).
//
// What llama.cpp does here (x86 with AVX2 / AVX-512): a Q4_K matrix whose row count is a multiple
// of 8 is repacked at load time into groups of 8 interleaved rows, and its matmul then
//   1. quantizes the activations to Q8_K: the first M - M % 4 rows four at a time, the rest one
//      by one. Both quantizers give the values of quantize_row_q8_K (scale -127 / max, half to
//      even), except that where +a and -a tie for a block's largest magnitude the 4-row one may
//      pick the other sign: then d and every quant of the block flip together and every product
//      below is unchanged, so one quantizer serves all rows here;
//   2. sends those first M - M % 4 rows (none when M < 4) through a "gemm" kernel, and every
//      other row through a "gemv" kernel.
// Both kernels form exact integers per sub-block j (32 elements): S_j = sc_j * (w_j . x_j) with
// the 6-bit scale, and B_j = m_j * (sum of x_j's quants) with the 6-bit min. They differ only in
// how many sub-blocks share one float step. Per output, superblock by superblock:
//   dd = d_w * d_x,  dm = dmin_w * d_x                                   (rounded products)
//   gemm: for p = 0..3:  acc  = fma((float)(S_2p + S_2p+1), dd, acc)
//                        accm = fma((float)(B_2p + B_2p+1), dm, accm)
//   gemv:                acc  = fma((float)(S_0 + ... + S_7), dd, acc)    (may round: > 2^24)
//                        accm = fma((float)(B_0 + ... + B_7), dm, accm)
//   y = acc - accm
// Each output has its own accumulators (a SIMD lane of ggml's, no horizontal sums), so the
// result depends only on the two rows and on which kernel the activation row's position picks.
//
// Here: dot_order is that order in scalar code, from integers formed by sub_ints_ref (scalar) or
// sub_ints_avx2 (AVX2: exact integers, so the same bits). The AVX-512 path computes the same integers (any
// grouping of an exact integer sum will do) and the same float steps: for M >= 4 it copies 16
// weight rows at a time into a panel (lane r = row r, VNNI dot products) and runs 4 activation
// rows per pass; for M < 4 (decode) it reads the GGUF rows directly, one weight row against up
// to 3 activation rows.
#include "backends/cpu/ggml_numerics/ggml_order.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/quants/dot/dot_impl.h"


namespace lll {
namespace ggml_order {

namespace {

constexpr int64_t kPanel = 16;   // weight rows per work item (and per panel)

// 6-bit scale and min of sub-block j (0..7) from a Q4_K block's 12 packed bytes.
inline void scale_min(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Scales (bytes 0..7 of *sc) and mins (of *mn) of the 8 sub-blocks, all at once (= scale_min).
inline void unpack_scales(const uint8_t* q, uint64_t* sc, uint64_t* mn) {
    uint32_t u[3];
    memcpy(u, q, 12);
    const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    const uint32_t s_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
    *sc = (u[0] & k6) | (uint64_t)s_hi << 32;
    *mn = (u[1] & k6) | (uint64_t)m_hi << 32;
}

// Rows [0, gemm_rows(M)) go through ggml's gemm, the rest through its gemv.
inline int64_t gemm_rows(int64_t M) { return M > 3 ? M - M % 4 : 0; }

// Sum of the Q8_K quants of sub-block j (32 elements) from the block's sums of 16.
inline int32_t sub_sum(const block_q8_K& x, int j) { return x.bsums[2 * j] + x.bsums[2 * j + 1]; }

// S_j and B_j (j = 0..7) of one superblock, as the header comment defines them.
void sub_ints_ref(const block_q4_K& w, const block_q8_K& x, int32_t* S, int32_t* B) {
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min(w.scales, j, &sc, &m);
        // Sub-blocks 2c and 2c+1 are the low and high nibbles of the 32 bytes qs[32c..].
        const uint8_t* q = w.qs + 32 * (j / 2);
        const int shift = 4 * (j & 1);
        const int8_t* xq = x.qs + 32 * j;
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += ((q[l] >> shift) & 15) * xq[l];
        S[j] = sc * dot;
        B[j] = m * sub_sum(x, j);
    }
}

// One output in ggml's order from the integers of `ints` (sub_ints_ref or its AVX2 twin);
// pairs: the gemm's grouping (else the gemv's).
template <class Ints>
float dot_order(const block_q4_K* w, const block_q8_K* x, int64_t nb, bool pairs, Ints ints) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        int32_t S[8], B[8];
        ints(w[b], x[b], S, B);
        const float dd = fp16_to_f32(w[b].d) * x[b].d;
        const float dm = fp16_to_f32(w[b].dmin) * x[b].d;
        if (pairs) {
            for (int p = 0; p < 4; ++p) {
                acc = fmaf((float)(S[2 * p] + S[2 * p + 1]), dd, acc);
                accm = fmaf((float)(B[2 * p] + B[2 * p + 1]), dm, accm);
            }
        } else {
            int32_t s = 0, bm = 0;
            for (int j = 0; j < 8; ++j) s += S[j], bm += B[j];
            acc = fmaf((float)s, dd, acc);
            accm = fmaf((float)bm, dm, accm);
        }
    }
    return acc - accm;
}

#if LLL_BUILD_AVX2
// sub_ints_ref with AVX2 integer sums (exact: nibble x int8 pairs stay within int16). The float
// steps stay in dot_order, one output at a time.
void sub_ints_avx2(const block_q4_K& w, const block_q8_K& x, int32_t* S, int32_t* B) {
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256i v[8];   // v[j]: sub-block j's dot product in 8 partial lanes
    for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)(w.qs + 32 * c));
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        v[2 * c] = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i*)(x.qs + 64 * c))), ones);
        v[2 * c + 1] = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i*)(x.qs + 64 * c + 32))), ones);
    }
    const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    const __m256i dots = _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
    uint64_t sc, mn;
    unpack_scales(w.scales, &sc, &mn);
    const __m256i sc8 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
    const __m256i mn8 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn));
    const __m256i subs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)x.bsums), ones);   // sub_sum(x, j)
    _mm256_storeu_si256((__m256i*)S, _mm256_mullo_epi32(dots, sc8));
    _mm256_storeu_si256((__m256i*)B, _mm256_mullo_epi32(subs, mn8));
}
#endif

#if LLL_BUILD_AVX512
// One superblock of 16 weight rows, lane r = row r: what the 4-row kernel loads per step.
struct alignas(64) PanelBlock {
    float d[16], dmin[16];
    int32_t sc[8][16];     // scale of sub-block j
    int32_t mins[4][16];   // int16 pairs: min of sub-block 2c (low half), of 2c+1 (high half)
    uint8_t qs[4][8][64];  // [c][t]: the row's bytes qs[32c + 4t .. +3] at 4r
};

// Rows n0 .. n0+rows-1 (rows <= 16) into a panel; missing rows are zero.
void repack_panel(const uint8_t* W, size_t wrb, int64_t n0, int64_t rows, int64_t nb, PanelBlock* P) {
    for (int64_t b = 0; b < nb; ++b) {
        PanelBlock& p = P[b];
        if (rows < kPanel) memset(&p, 0, sizeof(p));
        for (int64_t r = 0; r < rows; ++r) {
            const block_q4_K& blk = ((const block_q4_K*)(W + (n0 + r) * wrb))[b];
            p.d[r] = _cvtsh_ss(blk.d), p.dmin[r] = _cvtsh_ss(blk.dmin);
            uint64_t sc, mn;
            unpack_scales(blk.scales, &sc, &mn);
            for (int j = 0; j < 8; ++j) p.sc[j][r] = (int32_t)((sc >> (8 * j)) & 0xff);
            for (int c = 0; c < 4; ++c) p.mins[c][r] = (int32_t)(((mn >> (16 * c)) & 0xff) | ((mn >> (16 * c + 8)) & 0xff) << 16);
            for (int c = 0; c < 4; ++c)
                for (int t = 0; t < 8; ++t) memcpy(&p.qs[c][t][4 * r], blk.qs + 32 * c + 4 * t, 4);
        }
    }
}

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// The sums of sub-blocks 2c and 2c+1 of x as an int16 pair (each is at most 32 * 127).
inline int32_t sum_pair(const block_q8_K& x, int c) {
    return (int32_t)(uint16_t)(int16_t)sub_sum(x, 2 * c) | ((int32_t)(uint16_t)(int16_t)sub_sum(x, 2 * c + 1) << 16);
}

// R activation rows x[0..R) against one panel: y[r * ldy + lane] for the lanes in `mask`.
// Integer dot products lane by lane (vpdpbusd: 4 products per step), then ggml's float steps.
template <int R, bool kPairs>
void panel_tile(const PanelBlock* P, int64_t nb, const block_q8_K* const* x, float* y, int64_t ldy,
                __mmask16 mask) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[R], accm[R];
    for (int r = 0; r < R; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const PanelBlock& p = P[b];
        const __m512 d = _mm512_load_ps(p.d), dmin = _mm512_load_ps(p.dmin);
        __m512i S[R], B[R];
        for (int r = 0; r < R; ++r) S[r] = B[r] = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
            __m512i lo[R], hi[R];
            for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_si512();
            for (int t = 0; t < 8; ++t) {
                const __m512i w = _mm512_load_si512(p.qs[c][t]);
                const __m512i wl = _mm512_and_si512(w, m4), wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
                for (int r = 0; r < R; ++r) {
                    const int8_t* xq = x[r][b].qs + 64 * c + 4 * t;
                    lo[r] = _mm512_dpbusd_epi32(lo[r], wl, bcast4(xq));
                    hi[r] = _mm512_dpbusd_epi32(hi[r], wh, bcast4(xq + 32));
                }
            }
            const __m512i sl = _mm512_load_si512(p.sc[2 * c]), sh = _mm512_load_si512(p.sc[2 * c + 1]);
            const __m512i mn = _mm512_load_si512(p.mins[c]);
            for (int r = 0; r < R; ++r) {
                const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(lo[r], sl), _mm512_mullo_epi32(hi[r], sh));
                const __m512i m = _mm512_madd_epi16(mn, _mm512_set1_epi32(sum_pair(x[r][b], c)));
                if constexpr (kPairs) {
                    const __m512 xd = _mm512_set1_ps(x[r][b].d);
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, xd), acc[r]);
                    accm[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, xd), accm[r]);
                } else {
                    S[r] = _mm512_add_epi32(S[r], s), B[r] = _mm512_add_epi32(B[r], m);
                }
            }
        }
        if constexpr (!kPairs) {
            for (int r = 0; r < R; ++r) {
                const __m512 xd = _mm512_set1_ps(x[r][b].d);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[r]), _mm512_mul_ps(d, xd), acc[r]);
                accm[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(B[r]), _mm512_mul_ps(dmin, xd), accm[r]);
            }
        }
    }
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * ldy, mask, _mm512_sub_ps(acc[r], accm[r]));
}

// All M rows against one 16-row panel: 4-row gemm tiles, then the gemv rows.
void panel_all_rows(const PanelBlock* P, int64_t nb, const uint8_t* X, size_t xrb, int64_t M, float* y,
                    int64_t ldy, __mmask16 mask) {
    const block_q8_K* x[4];
    auto rows_at = [&](int64_t m, int64_t n) {
        for (int64_t i = 0; i < n; ++i) x[i] = (const block_q8_K*)(X + (m + i) * xrb);
    };
    const int64_t mg = gemm_rows(M);
    for (int64_t m = 0; m < mg; m += 4) {
        rows_at(m, 4);
        panel_tile<4, true>(P, nb, x, y + m * ldy, ldy, mask);
    }
    rows_at(mg, M - mg);
    switch (M - mg) {
        case 3: panel_tile<3, false>(P, nb, x, y + mg * ldy, ldy, mask); break;
        case 2: panel_tile<2, false>(P, nb, x, y + mg * ldy, ldy, mask); break;
        case 1: panel_tile<1, false>(P, nb, x, y + mg * ldy, ldy, mask); break;
        default: break;
    }
}

// Decode-sized batches (M < 4: every row is a gemv row): one GGUF weight row against C
// activation rows, no repacking. A vector holds 64 elements, sub-blocks 2h and 2h+1 in its
// halves: vpmaddubsw forms pair sums (at most 2 * 15 * 127, no saturation), vpmaddwd scales them
// by the sub-block's 6-bit scale into exact int32 lanes, and one horizontal sum per superblock
// gives S_0 + ... + S_7.
template <int C>
void row_gemv(const block_q4_K* w, int64_t nb, const block_q8_K* const* x, float* y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i nibble_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i scale_idx[4];   // int16 lane i of chunk h's scale vector <- scale byte 2h + (i >= 16)
    for (int h = 0; h < 4; ++h)
        scale_idx[h] = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * h)), _mm256_set1_epi16((short)(2 * h + 1)), 1);
    float acc[C], accm[C];
    for (int c = 0; c < C; ++c) acc[c] = accm[c] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const block_q4_K& blk = w[b];
        uint64_t sc, mn;
        unpack_scales(blk.scales, &sc, &mn);
        const __m512i sc8 = _mm512_set1_epi64((long long)sc);
        __m512i V[C];
        for (int c = 0; c < C; ++c) V[c] = _mm512_setzero_si512();
        for (int h = 0; h < 4; ++h) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(blk.qs + 32 * h)));
            const __m512i wv = _mm512_and_si512(_mm512_srlv_epi16(q, nibble_shift), m4);
            const __m512i sv = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, scale_idx[h], sc8);
            for (int c = 0; c < C; ++c) {
                const __m512i p = _mm512_maddubs_epi16(wv, _mm512_loadu_si512(x[c][b].qs + 64 * h));
                V[c] = _mm512_add_epi32(V[c], _mm512_madd_epi16(p, sv));
            }
        }
        const __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
        const float dw = _cvtsh_ss(blk.d), dmw = _cvtsh_ss(blk.dmin);
        for (int c = 0; c < C; ++c) {
            const int16_t* bs = x[c][b].bsums;   // pairs of sums of 16 -> the 8 sub-block sums
            const __m128i sub = _mm_hadd_epi16(_mm_loadu_si128((const __m128i*)bs), _mm_loadu_si128((const __m128i*)(bs + 8)));
            __m128i mt = _mm_madd_epi16(mins, sub);
            mt = _mm_add_epi32(mt, _mm_shuffle_epi32(mt, 0x4e));
            mt = _mm_add_epi32(mt, _mm_shuffle_epi32(mt, 0xb1));
            acc[c] = fmaf((float)_mm512_reduce_add_epi32(V[c]), dw * x[c][b].d, acc[c]);
            accm[c] = fmaf((float)_mm_cvtsi128_si32(mt), dmw * x[c][b].d, accm[c]);
        }
    }
    for (int c = 0; c < C; ++c) y[c * ldy] = acc[c] - accm[c];
}

void rows_gemv(const uint8_t* W, size_t wrb, int64_t n0, int64_t n1, int64_t nb, const uint8_t* X, size_t xrb,
               int64_t M, float* Y, int64_t ldy) {
    const block_q8_K* x[3];
    for (int64_t m = 0; m < M; ++m) x[m] = (const block_q8_K*)(X + m * xrb);
    for (int64_t n = n0; n < n1; ++n) {
        const block_q4_K* w = (const block_q4_K*)(W + n * wrb);
        switch (M) {
            case 3: row_gemv<3>(w, nb, x, Y + n, ldy); break;
            case 2: row_gemv<2>(w, nb, x, Y + n, ldy); break;
            default: row_gemv<1>(w, nb, x, Y + n, ldy); break;
        }
    }
}
#endif  // LLL_BUILD_AVX512

}  // namespace

bool matmul_q4_K(ThreadPool& pool, const void* W, int64_t N, int64_t K, const float* X, int64_t M, float* Y,
                 int64_t ldy, bool use_reference) {
    if (N <= 0 || N % 8 != 0) return false;
    if (K <= 0 || K % QK_K != 0) throw std::invalid_argument("matmul_q4_K: K must be a positive multiple of 256");
    if (M <= 0) return true;
    const int64_t nb = K / QK_K;
    const size_t wrb = (size_t)nb * sizeof(block_q4_K), xrb = (size_t)nb * sizeof(block_q8_K);
    [[maybe_unused]] bool fast = false;  // read only by the AVX-512 branches
#if LLL_BUILD_AVX512
    fast = !use_reference && isa_available(Isa::AVX512);
#endif
    auto ints = sub_ints_ref;
#if LLL_BUILD_AVX2
    if (!use_reference && isa_available(Isa::AVX2)) ints = sub_ints_avx2;
#endif
    const uint8_t* x = quantized_activations(pool, GGMLType::Q8_K, X, M, K);
    const uint8_t* w = (const uint8_t*)W;
    const int64_t mg = gemm_rows(M);
    for_row_runs(pool, N, kPanel, N * K * M, [&](int64_t n0, int64_t n1) {
#if LLL_BUILD_AVX512
        if (fast && M < 4) return rows_gemv(w, wrb, n0, n1, nb, x, xrb, M, Y, ldy);
        if (fast) {
            thread_local std::vector<PanelBlock> panel;
            if ((int64_t)panel.size() < nb) panel.resize(nb);
            repack_panel(w, wrb, n0, n1 - n0, nb, panel.data());
            return panel_all_rows(panel.data(), nb, x, xrb, M, Y + n0, ldy, (__mmask16)((1u << (n1 - n0)) - 1));
        }
#endif
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = n0; n < n1; ++n) {
                // decode streams the rows from memory: prefetch 8 KiB ahead, as the SIMD kernels do
                for (size_t o = 0; o < wrb; o += 64) __builtin_prefetch(w + n * wrb + o + 8192, 0, 3);
                Y[m * ldy + n] = dot_order((const block_q4_K*)(w + n * wrb), (const block_q8_K*)(x + m * xrb), nb, m < mg, ints);
            }
    });
    return true;
}

}  // namespace ggml_order
}  // namespace lll
