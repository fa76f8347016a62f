// attention_avx2.cpp — the AVX2 vector code of the chunk kernel (attention_chunk.h has its three
// passes): a 16-key tile is two 8-lane halves, one tile is scored per step (16 registers). Scalar
// reference: attend_row_scalar and attention_exp in attention.cpp; every (token, head) row gets
// the same float operations in the same order (scores: one sequential FMA chain over d per key;
// the exps' double sum in 16 lanes by key position % 16; PV: one sequential FMA chain over keys
// per d), so tests check the scalar, AVX2 and AVX-512 kernels bit-identical.
#include "backends/cpu/attention.h"

#if LLL_ATTN_AVX2
#include <immintrin.h>
#include <math.h>
#include <algorithm>
#include <vector>
#include "backends/cpu/attention_chunk.h"

namespace lll {
namespace attn_detail {
namespace {

constexpr int kHalf = kTile / 2;   // 8 lanes

inline __m256 round_f16(__m256 x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline __m256 load_f16x8(const fp16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

// In-register transpose of an 8x8 f32 matrix (row i = r[i]).
inline void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; ++i) {        // pairs of rows, 32-bit interleave within 128-bit lanes
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; ++g) {        // s[4g + c]: columns c and c + 4 of rows 4g..4g+3
        s[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {        // 128-bit halves: rows 0-3 with rows 4-7
        r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
    }
}

// kt[d][j] = K[j][d] in f32 (hd % 8 == 0).
void load_k_tile(const fp16_t* const* rows, int hd, float* kt) {
    for (int d0 = 0; d0 < hd; d0 += kHalf)
        for (int h = 0; h < 2; ++h) {
            __m256 r[8];
            for (int j = 0; j < 8; ++j) r[j] = load_f16x8(rows[h * kHalf + j] + d0);
            transpose8(r);
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + (d0 + i) * kTile + h * kHalf, r[i]);
        }
}

// vt[j][d] = V[j][d] in f32.
void load_v_tile(const fp16_t* const* rows, int hd, float* vt) {
    for (int j = 0; j < kTile; ++j)
        for (int d0 = 0; d0 < hd; d0 += kHalf) _mm256_storeu_ps(vt + j * hd + d0, load_f16x8(rows[j] + d0));
}


// Scores of NR rows x one tile: s[i][lane] = scale * (q_i . k_lane), a sequential FMA chain over
// d per lane; -inf where the key is outside row i's [start, pos]. 2 * NR accumulators (16
// registers in all with the two K halves and the broadcast).
template <int NR>
void score_tile(const ScoreJob& job) {
    const int hd = job.hd;
    __m256 acc[NR][2];
    for (int i = 0; i < NR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; ++d) {
        const __m256 k0 = _mm256_loadu_ps(job.kt + d * kTile), k1 = _mm256_loadu_ps(job.kt + d * kTile + kHalf);
        for (int i = 0; i < NR; ++i) {
            const __m256 qd = _mm256_set1_ps(job.qh[i * hd + d]);
            acc[i][0] = _mm256_fmadd_ps(qd, k0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(qd, k1, acc[i][1]);
        }
    }
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 scale = _mm256_set1_ps(job.scale), minus_inf = _mm256_set1_ps(-INFINITY);
    for (int h = 0; h < 2; ++h) {
        const __m256i key = _mm256_add_epi32(_mm256_set1_epi32(job.p0 + h * kHalf), iota);
        for (int i = 0; i < NR; ++i) {
            const __m256i hidden = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(job.start[i]), key),
                                                   _mm256_cmpgt_epi32(key, _mm256_set1_epi32(job.pos[i])));
            _mm256_storeu_ps(job.s + i * job.stride + h * kHalf,
                             _mm256_blendv_ps(_mm256_mul_ps(acc[i][h], scale), minus_inf, _mm256_castsi256_ps(hidden)));
        }
    }
}

// Rows in blocks of 6 (the last block shorter).
void score_rows(ScoreJob job, int n) {
    for (; n >= 6; n -= 6) {
        score_tile<6>(job);
        job.qh += 6 * job.hd, job.start += 6, job.pos += 6, job.s += 6 * job.stride;
    }
    switch (n) {   // remainder, unrolled so the accumulators stay in registers
        case 5: score_tile<5>(job); break;
        case 4: score_tile<4>(job); break;
        case 3: score_tile<3>(job); break;
        case 2: score_tile<2>(job); break;
        case 1: score_tile<1>(job); break;
        default: break;
    }
}

inline float hmax(__m256 v) {
    float x[kHalf];
    _mm256_storeu_ps(x, v);
    float m = x[0];
    for (int i = 1; i < kHalf; ++i) m = std::max(m, x[i]);
    return m;
}

// Scores of one row's tiles s[n_tiles][16] (invisible keys -inf) -> F16-rounded probabilities.
void softmax_row(float* s, int n_tiles) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int k = 0; k < 2 * n_tiles; ++k) m = _mm256_max_ps(_mm256_loadu_ps(s + kHalf * k), m);   // NaN ignored, as std::max
    const __m256 mx = _mm256_set1_ps(hmax(m));
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (int k = 0; k < n_tiles; ++k)      // lanes 0-3, 4-7 of the first half, 8-11, 12-15 of the second
        for (int h = 0; h < 2; ++h) {
            float* p = s + kTile * k + kHalf * h;
            const __m256 e = exp_nonpositive8(_mm256_sub_ps(_mm256_loadu_ps(p), mx));
            _mm256_storeu_ps(p, e);
            acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
    double lanes[kTile];
    for (int i = 0; i < 4; ++i) _mm256_storeu_pd(lanes + 4 * i, acc[i]);
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum_lanes(lanes)));
    for (int k = 0; k < 2 * n_tiles; ++k)
        _mm256_storeu_ps(s + kHalf * k, round_f16(_mm256_mul_ps(_mm256_loadu_ps(s + kHalf * k), inv)));
}

// For NR rows r: out_r[d] = fma(p_r[j], v_j[d], out_r[d]) for keys j = ja..jb of the tile, in order
// (each lane a sequential FMA chain over keys). DV vectors of d at a time.
template <int DV, int NR>
void pv_tile(const float* vt, int hd, const float* const* p, int ja, int jb, float* const* out) {
    for (int d0 = 0; d0 < hd; d0 += DV * kHalf) {
        __m256 acc[NR][DV];
        for (int r = 0; r < NR; ++r)
            for (int i = 0; i < DV; ++i) acc[r][i] = _mm256_loadu_ps(out[r] + d0 + kHalf * i);
        for (int j = ja; j <= jb; ++j) {
            const float* v = vt + j * hd + d0;
            __m256 pj[NR];
            for (int r = 0; r < NR; ++r) pj[r] = _mm256_set1_ps(p[r][j]);
            for (int i = 0; i < DV; ++i) {
                __m256 vv = _mm256_loadu_ps(v + kHalf * i);
                __asm__("" : "+x"(vv));   // one load for NR FMAs, not folded into each of them
                for (int r = 0; r < NR; ++r) acc[r][i] = _mm256_fmadd_ps(pj[r], vv, acc[r][i]);
            }
        }
        for (int r = 0; r < NR; ++r)
            for (int i = 0; i < DV; ++i) _mm256_storeu_ps(out[r] + d0 + kHalf * i, acc[r][i]);
    }
}

template <int NR>
void pv_rows(const float* vt, int hd, const float* const* p, int ja, int jb, float* const* out) {
    if (hd % 16 == 0) pv_tile<2, NR>(vt, hd, p, ja, jb, out);
    else pv_tile<1, NR>(vt, hd, p, ja, jb, out);
}

// Rows of the chunk: F16-rounded queries, visible ranges; output rows zeroed (PV accumulates).
void setup_rows(const float* q, float* out, const Batch& b, const Chunk& c, const Shape& sh, ChunkScratch& w) {
    const int hd = sh.head_dim;
    int r = 0;
    for (int64_t t = c.t0; t < c.t1; ++t)
        for (int h = c.kv_head * sh.group; h < (c.kv_head + 1) * sh.group; ++h, ++r) {
            const int64_t off = (t * sh.n_head + h) * (int64_t)hd;
            for (int d = 0; d < hd; d += kHalf) {
                _mm256_storeu_ps(&w.qh[(int64_t)r * hd + d], round_f16(_mm256_loadu_ps(q + off + d)));
                _mm256_storeu_ps(out + off + d, _mm256_setzero_ps());
            }
            w.pos[r] = b.positions[t];
            w.start[r] = first_visible(w.pos[r], sh.window);
        }
}

// The vector code of attention_chunk.h's three passes.
struct Avx2 {
    static constexpr int kScoreTiles = 1;
    static constexpr int kPvF16Rows = 0;   // no pv_f16: pass 3 always converts the tile first
    static void setup_rows(const float* q, float* out, const Batch& b, const Chunk& c, const Shape& sh,
                           ChunkScratch& w) {
        lll::attn_detail::setup_rows(q, out, b, c, sh, w);
    }
    static void load_k_tile(const fp16_t* const* rows, int hd, float* kt) { lll::attn_detail::load_k_tile(rows, hd, kt); }
    static void score(const ScoreJob& job, int tiles, int n) {
        (void)tiles;   // one tile per step
        score_rows(job, n);
    }
    static void softmax_row(float* s, int n_tiles) { lll::attn_detail::softmax_row(s, n_tiles); }
    static void load_v_tile(const fp16_t* const* rows, int hd, float* vt) { lll::attn_detail::load_v_tile(rows, hd, vt); }
    template <int NR>
    static void pv(const float* vt, int hd, const float* const* p, int ja, int jb, float* const* o) {
        pv_rows<NR>(vt, hd, p, ja, jb, o);
    }
};

}  // namespace

void attend_chunk_avx2(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                       const Chunk& c, const Shape& sh) {
    attend_chunk<Avx2>(kv, layer, q, out, b, c, sh);
}

}  // namespace attn_detail
}  // namespace lll

#endif  // LLL_ATTN_AVX2
