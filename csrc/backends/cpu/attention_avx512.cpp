// attention_avx512.cpp — the AVX-512 vector code of the chunk kernel (attention_chunk.h has its
// three passes): a 16-key tile is one register, two tiles are scored per step. Scalar reference:
// attend_row_scalar and attention_exp in attention.cpp, which do the same float operations in
// the same order per (token, head) row; tests check the two bit-identical.
#include "backends/cpu/attention.h"

#if LLL_ATTN_AVX512
#include <immintrin.h>
#include <math.h>
#include <algorithm>
#include <vector>
#include "backends/cpu/attention_chunk.h"

namespace lll {
namespace attn_detail {
namespace {

inline __m512 round_f16(__m512 x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Index vectors of the three rounds of two-source word permutes (vpermt2w) that transpose a
// 16 x 16 block of F16 held two rows per register (z[i] = rows 2i, 2i+1: word 16r + c is row
// 2i + r, column c). Each round pairs registers holding disjoint rows and the same columns, and
// each output keeps half the columns for twice the rows, column-major (word = c * rows + r):
//   round 1: z[i], z[i+4] -> columns 8h..8h+7 of rows 2i, 2i+1, 2i+8, 2i+9      (h = output)
//   round 2: y[j], y[j+2] -> 4 columns of 8 rows
//   round 3: x[m], x[m+1] -> 2 columns of all 16 rows, in row order: o[k] = columns 2k, 2k+1.
// 24 permutes per block against the 64 shuffles of an f32 transpose (decode's three or four query
// rows per kv head spent more on transposing a K tile than on scoring it).
struct WordTranspose {
    __m512i idx[3][2];
    WordTranspose() {
        static const int kRowsA[8] = {0, 1, 8, 9, 4, 5, 12, 13};   // round 3's a rows, in x's order
        uint16_t w[3][2][32];
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 32; ++k) {
                const int c1 = k / 4, r1 = k % 4, col1 = 8 * h + c1;            // round 1
                w[0][h][k] = (uint16_t)(r1 < 2 ? 16 * r1 + col1 : 32 + 16 * (r1 - 2) + col1);
                const int c2 = 4 * h + k / 8, r2 = k % 8;                       // round 2
                w[1][h][k] = (uint16_t)(r2 < 4 ? 4 * c2 + r2 : 32 + 4 * c2 + r2 - 4);
                const int c3 = 2 * h + k / 16, row = k % 16;                    // round 3
                int at = 0;
                while (at < 8 && kRowsA[at] != row && kRowsA[at] + 2 != row) ++at;
                w[2][h][k] = (uint16_t)((kRowsA[at] == row ? 0 : 32) + 8 * c3 + at);
            }
        for (int r = 0; r < 3; ++r)
            for (int h = 0; h < 2; ++h) idx[r][h] = _mm512_loadu_si512(w[r][h]);
    }
};

// kt[d][j] = K[j][d] in f32: the transpose on the F16 words, then the conversion.
void load_k_tile(const fp16_t* const* rows, int hd, float* kt) {
    static const WordTranspose wt;
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512i z[8], y[8], x[8];
        for (int i = 0; i < 8; ++i)
            z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(rows[2 * i] + d0))),
                                      _mm256_loadu_si256((const __m256i*)(rows[2 * i + 1] + d0)), 1);
        for (int i = 0; i < 4; ++i)
            for (int h = 0; h < 2; ++h) y[i + 4 * h] = _mm512_permutex2var_epi16(z[i], wt.idx[0][h], z[i + 4]);
        for (int j : {0, 1, 4, 5})
            for (int h = 0; h < 2; ++h) x[j + 2 * h] = _mm512_permutex2var_epi16(y[j], wt.idx[1][h], y[j + 2]);
        for (int m = 0; m < 8; m += 2)
            for (int h = 0; h < 2; ++h) {
                const __m512i o = _mm512_permutex2var_epi16(x[m], wt.idx[2][h], x[m + 1]);
                float* dst = kt + (size_t)(d0 + 2 * (m + h)) * 16;
                _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm512_castsi512_si256(o)));
                _mm512_storeu_ps(dst + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(o, 1)));
            }
    }
}

// vt[j][d] = V[j][d] in f32.
void load_v_tile(const fp16_t* const* rows, int hd, float* vt) {
    for (int j = 0; j < kTile; ++j)
        for (int d0 = 0; d0 < hd; d0 += 16)
            _mm512_storeu_ps(vt + j * hd + d0, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(rows[j] + d0))));
}


// Scores of NR rows x NT tiles: s[i][lane] = scale * (q_i . k_lane), a sequential FMA chain over
// d per lane; -inf where the key is outside row i's [start, pos]. NR * NT accumulators; each
// broadcast q_i[d] serves NT tiles.
template <int NR, int NT>
void score_tile(const ScoreJob& job) {
    const int hd = job.hd;
    __m512 acc[NT][NR];
    for (int t = 0; t < NT; ++t)
        for (int i = 0; i < NR; ++i) acc[t][i] = _mm512_setzero_ps();
    for (int d = 0; d < hd; ++d) {
        __m512 k[NT];
        for (int t = 0; t < NT; ++t) k[t] = _mm512_loadu_ps(job.kt + (t * hd + d) * 16);
        for (int i = 0; i < NR; ++i) {
            const __m512 qd = _mm512_set1_ps(job.qh[i * hd + d]);
            for (int t = 0; t < NT; ++t) acc[t][i] = _mm512_fmadd_ps(qd, k[t], acc[t][i]);
        }
    }
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int t = 0; t < NT; ++t) {
        const __m512i key = _mm512_add_epi32(_mm512_set1_epi32(job.p0 + t * kTile), iota);
        for (int i = 0; i < NR; ++i) {
            const __mmask16 vis = _mm512_cmpge_epi32_mask(key, _mm512_set1_epi32(job.start[i])) &
                                  _mm512_cmple_epi32_mask(key, _mm512_set1_epi32(job.pos[i]));
            _mm512_storeu_ps(job.s + i * job.stride + t * kTile,
                             _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), vis, acc[t][i], _mm512_set1_ps(job.scale)));
        }
    }
}

// Rows in blocks of NB (the last block shorter), NT tiles each.
template <int NT, int NB>
void score_rows(ScoreJob job, int n) {
    for (; n >= NB; n -= NB) {
        score_tile<NB, NT>(job);
        job.qh += NB * job.hd, job.start += NB, job.pos += NB, job.s += NB * job.stride;
    }
    switch (n) {   // remainder, unrolled so the accumulators stay in registers
        case 7: score_tile<7, NT>(job); break;
        case 6: score_tile<6, NT>(job); break;
        case 5: score_tile<5, NT>(job); break;
        case 4: score_tile<4, NT>(job); break;
        case 3: score_tile<3, NT>(job); break;
        case 2: score_tile<2, NT>(job); break;
        case 1: score_tile<1, NT>(job); break;
        default: break;
    }
}

// Scores of one row's tiles s[n_tiles][16] (invisible keys -inf) -> F16-rounded probabilities.
void softmax_row(float* s, int n_tiles) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int k = 0; k < n_tiles; ++k) m = _mm512_max_ps(_mm512_loadu_ps(s + 16 * k), m);   // NaN ignored, as std::max
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();   // lanes 0-7, 8-15
    for (int k = 0; k < n_tiles; ++k) {
        const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * k), mx));
        _mm512_storeu_ps(s + 16 * k, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    double lanes[kTile];
    _mm512_storeu_pd(lanes, lo);
    _mm512_storeu_pd(lanes + 8, hi);
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum_lanes(lanes)));
    for (int k = 0; k < n_tiles; ++k)
        _mm512_storeu_ps(s + 16 * k, round_f16(_mm512_mul_ps(_mm512_loadu_ps(s + 16 * k), inv)));
}

// For NR rows r: out_r[d] = fma(p_r[j], v_j[d], out_r[d]) for keys j = ja..jb of the tile, in order
// (each lane a sequential FMA chain over keys). DV vectors of d at a time; NR * DV independent
// accumulators hide the FMA latency, and each V load serves NR rows.
// V values of a tile: f32 rows converted once (vt[16][hd]), or the cache's F16 rows read and
// converted in place (rows[16]).
struct VF32 {
    const float* vt;
    int hd;
    __m512 load(int j, int d) const { return _mm512_loadu_ps(vt + j * hd + d); }
};
struct VF16 {
    const fp16_t* const* rows;
    __m512 load(int j, int d) const { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(rows[j] + d))); }
};

template <int DV, int NR, class V>
void pv_tile(const V& v, int hd, const float* const* p, int ja, int jb, float* const* out) {
    for (int d0 = 0; d0 < hd; d0 += DV * 16) {
        __m512 acc[NR][DV];
        for (int r = 0; r < NR; ++r)
            for (int i = 0; i < DV; ++i) acc[r][i] = _mm512_loadu_ps(out[r] + d0 + 16 * i);
        for (int j = ja; j <= jb; ++j) {
            __m512 pj[NR];
            for (int r = 0; r < NR; ++r) pj[r] = _mm512_set1_ps(p[r][j]);
            for (int i = 0; i < DV; ++i) {
                __m512 vv = v.load(j, d0 + 16 * i);
                __asm__("" : "+v"(vv));   // one load for NR FMAs, not folded into each of them
                for (int r = 0; r < NR; ++r) acc[r][i] = _mm512_fmadd_ps(pj[r], vv, acc[r][i]);
            }
        }
        for (int r = 0; r < NR; ++r)
            for (int i = 0; i < DV; ++i) _mm512_storeu_ps(out[r] + d0 + 16 * i, acc[r][i]);
    }
}

template <int NR, class V>
void pv_rows(const V& v, int hd, const float* const* p, int ja, int jb, float* const* out) {
    if (hd % 64 == 0) pv_tile<4, NR>(v, hd, p, ja, jb, out);
    else pv_tile<1, NR>(v, hd, p, ja, jb, out);
}

// Rows of the chunk: F16-rounded queries, visible ranges; output rows zeroed (PV accumulates).
void setup_rows(const float* q, float* out, const Batch& b, const Chunk& c, const Shape& sh, ChunkScratch& w) {
    const int hd = sh.head_dim;
    int r = 0;
    for (int64_t t = c.t0; t < c.t1; ++t)
        for (int h = c.kv_head * sh.group; h < (c.kv_head + 1) * sh.group; ++h, ++r) {
            const int64_t off = (t * sh.n_head + h) * (int64_t)hd;
            for (int d = 0; d < hd; d += 16) {
                _mm512_storeu_ps(&w.qh[(int64_t)r * hd + d], round_f16(_mm512_loadu_ps(q + off + d)));
                _mm512_storeu_ps(out + off + d, _mm512_setzero_ps());
            }
            w.pos[r] = b.positions[t];
            w.start[r] = first_visible(w.pos[r], sh.window);
        }
}

// The vector code of attention_chunk.h's three passes.
struct Avx512 {
    static constexpr int kScoreTiles = 2;
    static void setup_rows(const float* q, float* out, const Batch& b, const Chunk& c, const Shape& sh,
                           ChunkScratch& w) {
        lll::attn_detail::setup_rows(q, out, b, c, sh, w);
    }
    static void load_k_tile(const fp16_t* const* rows, int hd, float* kt) { lll::attn_detail::load_k_tile(rows, hd, kt); }
    static void score(const ScoreJob& job, int tiles, int n) {
        if (tiles == 2) score_rows<2, 8>(job, n);
        else score_rows<1, 8>(job, n);
    }
    static void softmax_row(float* s, int n_tiles) { lll::attn_detail::softmax_row(s, n_tiles); }
    static void load_v_tile(const fp16_t* const* rows, int hd, float* vt) { lll::attn_detail::load_v_tile(rows, hd, vt); }
    template <int NR>
    static void pv(const float* vt, int hd, const float* const* p, int ja, int jb, float* const* o) {
        pv_rows<NR>(VF32{vt, hd}, hd, p, ja, jb, o);
    }
    // Pass 3 straight from the F16 rows, for chunks of up to kPvF16Rows rows (decode: one call per
    // tile converts each V value once, where converting the tile into vt first stored and
    // reloaded it); longer chunks convert each tile once into vt, which every row group reads.
    static constexpr int kPvF16Rows = 4;
    template <int NR>
    static void pv_f16(const fp16_t* const* rows, int hd, const float* const* p, int ja, int jb, float* const* o) {
        pv_rows<NR>(VF16{rows}, hd, p, ja, jb, o);
    }
};

}  // namespace

void attend_chunk_avx512(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                         const Chunk& c, const Shape& sh) {
    attend_chunk<Avx512>(kv, layer, q, out, b, c, sh);
}

}  // namespace attn_detail
}  // namespace lll

#endif  // LLL_ATTN_AVX512
