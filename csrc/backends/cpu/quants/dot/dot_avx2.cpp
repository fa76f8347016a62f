// dot_avx2.cpp — AVX2 + FMA + F16C tile kernels (no VNNI, so they run on any AVX2 CPU).
// Scalar references: dot_scalar.cpp.
//
// Q4_0 ... Q8_0 and Q4_K, Q5_K, Q6_K are block-sequential (bseq.h, bseq_avx2.cpp); IQ4_NL blocks
// go one block (32 quants = one ymm) per step, and prompts through IQ4NLPanel, a unit kernel of
// the same float operations (dot_avx2_panel.h). Signed x signed byte products use
// the vpsignb trick (|w| x sign(y, w), then vpmaddubsw: |w| <= 128 and |y| <= 127 keep the
// int16 pair sums below 32767) and vpmaddwd with ones to int32; the 8 lanes are converted and
// accumulated with the block's scale product in one FMA. K-quants multiply the int16 pair sums
// by the sub-block scales with vpmaddwd and keep a super-block's sums in int32.
#include "backends/cpu/quants/dot/dot_impl.h"

#include "backends/cpu/quants/bseq/bseq.h"
#include "backends/cpu/quants/dot/dot_avx2_panel.h"

#if LLL_BUILD_AVX2
#include <immintrin.h>
#include <string.h>

namespace lll {
namespace kern {
// Named, not anonymous: GCC gives templates instantiated on alias templates from an anonymous
// namespace external (weak) linkage, so equally named tiles of two files would be merged.
namespace avx2_impl {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t load_u16(const uint8_t* p) { uint16_t v; memcpy(&v, p, 2); return v; }

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// hsum8 of four vectors at once: [hsum8(a), hsum8(b), hsum8(c), hsum8(d)], each sum made of
// hsum8's additions (halves, then lanes 0+2 and 1+3, then those two), so of the same bits. A
// tile's four weight rows of one activation row end in 10 instructions instead of 24.
inline __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));   // a c | b d
    const __m256 h = _mm256_hadd_ps(z, z);                                             // a c a c | b d b d
    return _mm_unpacklo_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high nibbles (16..31).
// The 16 bytes are loaded into both halves (a load, no shuffle) and the upper half shifted.
inline __m256i unpack_nibbles_16(const uint8_t* p) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)p));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// A weight block's quants and scales. Signed quants keep |q| beside q: vpmaddubsw needs an
// unsigned operand, and |q| is shared by all activation rows of a tile.
struct WBlock { __m256i q, aq; float d; };
inline WBlock signed_block(__m256i q, float d) { return {q, _mm256_sign_epi8(q, q), d}; }

// Sum of products of signed bytes, as 8 int32 lanes (pairs of 4 products): |w| x sign(y, w).
inline __m256i dot_i8(const WBlock& w, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(w.aq, _mm256_sign_epi8(y, w.q));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// ---- IQ4_NL block steps: W = one weight block, X = one Q8_0 activation block -----------------

// 32 nibbles (element order) -> the signed grid values kvalues_iq4nl[nibble] (vpshufb looks up
// within each 128-bit lane, so the 16-byte table sits in both).
inline __m256i iq4_grid(__m256i nibbles) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)kvalues_iq4nl));
    return _mm256_shuffle_epi8(table, nibbles);
}

struct IQ4_NLStep {
    static constexpr int kW = sizeof(block_iq4_nl), kX = sizeof(block_q8_0);
    static WBlock load_w(const uint8_t* p) { return signed_block(iq4_grid(unpack_nibbles_16(p + 2)), h2f(load_u16(p))); }
    static __m256i dot(const WBlock& w, __m256i y) { return dot_i8(w, y); }   // |grid| <= 127
};

// The quants of a Q8_0 activation block (the scales d of a tile's blocks are converted
// together, act_scales).
inline __m256i act_quants(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)(p + 2)); }

// The f16 scales of C activation blocks xs bytes apart, converted by one vcvtph2ps and broadcast.
template <int C>
inline void act_scales(const uint8_t* x, size_t xs, __m256 (&xd)[C]) {
    static_assert(C <= 4, "four scales per conversion");
    uint64_t packed = 0;
    for (int c = 0; c < C; ++c) packed |= (uint64_t)load_u16(x + c * xs) << (16 * c);
    const __m128 d4 = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)packed));
    const __m256 d8 = _mm256_set_m128(d4, d4);
    if constexpr (C > 0) xd[0] = _mm256_shuffle_ps(d8, d8, 0x00);
    if constexpr (C > 1) xd[1] = _mm256_shuffle_ps(d8, d8, 0x55);
    if constexpr (C > 2) xd[2] = _mm256_shuffle_ps(d8, d8, 0xAA);
    if constexpr (C > 3) xd[3] = _mm256_shuffle_ps(d8, d8, 0xFF);
}

// Scales: the block scale product d_w * d_x is one vmulps of two broadcasts made once per
// block (the same float product as a scalar multiply, so the tile shape changes no bit).
template <class S, int R, int C>
struct LegacyTile {
    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        __m256 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < k / 32; ++b) {
            __m256i xv[C];
            __m256 xd[C];
            for (int c = 0; c < C; ++c) xv[c] = act_quants(x + c * xs + b * S::kX);
            act_scales<C>(x + b * S::kX, xs, xd);
            for (int r = 0; r < R; ++r) {
                prefetch_ahead<S::kW>(w + r * ws + b * S::kW);
                const WBlock wv = S::load_w(w + r * ws + b * S::kW);
                const __m256 wd = _mm256_set1_ps(wv.d);
                for (int c = 0; c < C; ++c)
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S::dot(wv, xv[c])), _mm256_mul_ps(wd, xd[c]), acc[r][c]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) y[c * ldy + r] = hsum8(acc[r][c]);
    }
};

template <int R, int C> using IQ4NLTile = LegacyTile<IQ4_NLStep, R, C>;

// ---- IQ4_NL prompts: the unit kernel (dot_avx2_panel.h) ---------------------------------------
//
// The tiles above spend a vmulps (the pair's scale product) and a share of a weight block's
// unpacking on every (weight row, activation row, block), and keep too few pairs in registers to
// hide either. In the panel, lane j of a tile's accumulator becomes accumulator j of 8 rows: the
// int32 sums are dot_i8's lanes, acc_j = fma(float(sum_j), d_w * d_x, acc_j) block after block with
// the block's 8 scale products in one vmulps, and hsum8's additions at the end, so every pair
// gets the tiles' bits.
struct IQ4NLPanel {
    struct Block {
        __m256i q[8], aq[8];   // q[j] lane r: grid values 4j..4j+3 of row r; aq = |q|
        __m256 d;              // lane r: row r's scale (0 past the rows)
    };
    struct Acc { __m256 v[8]; };   // v[j]: lane j of the tiles' accumulators, one row per lane
    static constexpr int kElems = QK4_NL, kChunk = 8;   // 2 x 8 x 544 bytes of panels

    static void unpack(const uint8_t* w, size_t ws, int nr, int64_t b0, int64_t b1, Block* out) {
        for (int64_t b = b0; b < b1; ++b) {
            __m256i v[avx2_panel::kPanelRows];
            alignas(32) float d[avx2_panel::kPanelRows] = {};
            for (int r = 0; r < avx2_panel::kPanelRows; ++r) {
                const uint8_t* blk = w + r * ws + b * sizeof(block_iq4_nl);
                v[r] = r < nr ? iq4_grid(unpack_nibbles_16(blk + 2)) : _mm256_setzero_si256();
                if (r < nr) d[r] = h2f(load_u16(blk));
            }
            avx2_panel::transpose8x8_epi32(v);
            Block& o = out[b - b0];
            for (int j = 0; j < 8; ++j) {
                o.q[j] = v[j];
                o.aq[j] = _mm256_sign_epi8(v[j], v[j]);
            }
            o.d = _mm256_load_ps(d);
        }
    }

    static void run(const Block* panel, int64_t b0, int64_t b1, const uint8_t* x, Acc& a) {
        const __m256i ones = _mm256_set1_epi16(1);
        __m256 acc[8];
        for (int j = 0; j < 8; ++j) acc[j] = a.v[j];
        for (int64_t b = b0; b < b1; ++b) {
            const Block& pb = panel[b - b0];
            const uint8_t* xb = x + b * sizeof(block_q8_0);
            const __m256 scale = _mm256_mul_ps(pb.d, _mm256_set1_ps(h2f(load_u16(xb))));
            for (int j = 0; j < 8; ++j) {
                int32_t xj;
                memcpy(&xj, xb + 2 + 4 * j, 4);
                const __m256i p16 = _mm256_maddubs_epi16(pb.aq[j], _mm256_sign_epi8(_mm256_set1_epi32(xj), pb.q[j]));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)), scale, acc[j]);
            }
        }
        for (int j = 0; j < 8; ++j) a.v[j] = acc[j];
    }

    // hsum8's additions, lane by lane: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
    static void finish(const Acc& a, int nr, float* y) {
        const __m256* v = a.v;
        avx2_panel::store_rows(y, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(v[0], v[4]), _mm256_add_ps(v[2], v[6])),
                                                _mm256_add_ps(_mm256_add_ps(v[1], v[5]), _mm256_add_ps(v[3], v[7]))),
                               nr);
    }
};

// Up to 4 activation rows (one 2x4 tile wide) the tiles win; from 5 the unit does (ms per row,
// N = 4864, K = 896, 1 thread, Zen 3: 0.15 / 0.17 at 4 rows, 0.17 / 0.16 at 5, 2026-12-06).
constexpr int kIQ4NLUnitMinRows = 5;

KernelSet make_iq4nl_set() {
    KernelSet ks = make_tile_set<IQ4NLTile, 2, 4>(Isa::AVX2);
    ks.unit = &avx2_panel::panel_unit<IQ4NLPanel>;
    ks.unit_min_rows = kIQ4NLUnitMinRows;
    return ks;
}

// ---- K-quants --------------------------------------------------------------------------------

// From 16 int16 scales: lanes 0..7 = scale g, lanes 8..15 = scale g + 1 (g even).
inline __m256i scale_pair(__m256i sc16, int g) {
    const __m256i both = _mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(g / 2));   // (sc[g], sc[g+1]) x 8
    return _mm256_shuffle_epi8(both, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                      2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
}

// K-quant tiles of R weight rows x C activation rows that unpack each weight super-block once
// for all C activation rows. A super-block is 8 parts of 32 quants, part t against activations
// 32t..32t+31, each with its int16 sub-block scales; the unpacker U gives the parts, how a part
// multiplies the activations (unsigned quants: vpmaddubsw; signed: the vpsign trick), and the
// per-row finish (mins or offsets against the activations' block sums, then the FMAs). The
// integer sums are exact, so a product's bits do not depend on the tile it was computed in.
struct Q2Unpack {
    const block_q2_K* b;
    __m128i sc;
    __m256i sc16;   // the low nibbles: 16 scales
    explicit Q2Unpack(const uint8_t* blk)
        : b((const block_q2_K*)blk), sc(_mm_loadu_si128((const __m128i*)b->scales)),
          sc16(_mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(0x0F)))) {}
    // part t = 4h + s: elements 128h + 32s + l = (qs[32h + l] >> 2s) & 3
    __m256i quants(int t) const {
        const __m256i q2 = _mm256_loadu_si256((const __m256i*)(b->qs + 32 * (t / 4)));
        return _mm256_and_si256(_mm256_srli_epi16(q2, 2 * (t % 4)), _mm256_set1_epi8(3));
    }
    __m256i scales(int t) const { return scale_pair(sc16, 2 * t); }
    static __m256i dot(__m256i q, __m256i y) { return _mm256_maddubs_epi16(q, y); }
    void finish(const block_q8_K& x, __m256i isum, __m256& acc) const {
        // mins: high nibbles of the scales, one per 16-element group, against bsums
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F)));
        const __m256i summ = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)x.bsums), mins);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(b->d) * x.d), acc);
        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_set1_ps(h2f(b->dmin) * x.d), acc);
    }
};

struct Q3Unpack {
    const block_q3_K* b;
    __m256i sc16;   // 16 signed scales
    explicit Q3Unpack(const uint8_t* blk)
        : b((const block_q3_K*)blk), sc16(_mm256_cvtepi8_epi16(q3_K_scales_i8(b->scales))) {}
    // part t = 4h + s: value = low - 4 + 4 * high = q' - 4 with q' = low | high << 2 in [0, 7],
    // low = (qs[32h + l] >> 2s) & 3, high = bit 4h + s of hmask[l]
    __m256i quants(int t) const {
        const int h = t / 4, s = t % 4;
        const __m256i q3 = _mm256_loadu_si256((const __m256i*)(b->qs + 32 * h));
        const __m256i hm = _mm256_loadu_si256((const __m256i*)b->hmask);
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q3, 2 * s), _mm256_set1_epi8(3));
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + s), _mm256_set1_epi8(1));
        return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
    }
    __m256i scales(int t) const { return scale_pair(sc16, 2 * t); }
    static __m256i dot(__m256i q, __m256i y) { return _mm256_maddubs_epi16(q, y); }
    void finish(const block_q8_K& x, __m256i isum, __m256& acc) const {
        const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)x.bsums), sc16);
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 2));   // - 4 * sum(sc * bsums), exact
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(b->d) * x.d), acc);
    }
};

// IQ4_XS: per 32-element sub-block the grid values (signed: the vpsign trick; |grid|, |y| <= 127,
// no saturation) times the activations, times the sub-block scale by vpmaddwd.
struct IQ4XSUnpack {
    const block_iq4_xs* b;
    explicit IQ4XSUnpack(const uint8_t* blk) : b((const block_iq4_xs*)blk) {}
    __m256i quants(int t) const { return iq4_grid(unpack_nibbles_16(b->qs + 16 * t)); }
    __m256i scales(int t) const {
        const int ls = ((b->scales_l[t / 2] >> 4 * (t % 2)) & 0x0F) | (((b->scales_h >> 2 * t) & 3) << 4);
        return _mm256_set1_epi16((int16_t)(ls - 32));
    }
    static __m256i dot(__m256i q, __m256i y) { return _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q)); }
    void finish(const block_q8_K& x, __m256i isum, __m256& acc) const {
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(b->d) * x.d), acc);
    }
};

template <class U, int kBlockBytes>
struct KUnpack {
    static constexpr int kBytes = kBlockBytes;
    static U at(const uint8_t* blk) { return U(blk); }
};

template <class K, int R, int C>
struct KTile {
    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        __m256 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
        for (int64_t i = 0; i < k / QK_K; ++i)
            for (int r = 0; r < R; ++r) {
                const uint8_t* blk = w + r * ws + i * K::kBytes;
                prefetch_ahead<K::kBytes>(blk);
                const auto wb = K::at(blk);
                __m256i isum[C];
                for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
                for (int t = 0; t < 8; ++t) {
                    const __m256i q = wb.quants(t), sc = wb.scales(t);
                    for (int c = 0; c < C; ++c) {
                        const __m256i yv = _mm256_loadu_si256((const __m256i*)(((const block_q8_K*)(x + c * xs))[i].qs + 32 * t));
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(decltype(wb)::dot(q, yv), sc));
                    }
                }
                for (int c = 0; c < C; ++c) wb.finish(((const block_q8_K*)(x + c * xs))[i], isum[c], acc[r][c]);
            }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) y[c * ldy + r] = hsum8(acc[r][c]);
    }
};

// ---- plain float types -----------------------------------------------------------------------

struct F32Load {
    static constexpr int kSize = 4;
    static __m256 load(const uint8_t* p) { return _mm256_loadu_ps((const float*)p); }
};
struct F16Load {
    static constexpr int kSize = 2;
    static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
};
struct BF16Load {
    static constexpr int kSize = 2;
    static __m256 load(const uint8_t* p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
    }
};

// One accumulator per pair, 8 elements per step; the ragged end is zero-padded to 8. The large
// tiles matter for F16 / BF16: every load converts, and a tile converts each of its R + C rows
// once per step for R x C FMAs.
template <class L, int R, int C>
struct FloatTile {
    static inline void step(const uint8_t* const* w, const uint8_t* const* x, __m256 (&acc)[R][C]) {
        __m256 xv[C];
        for (int c = 0; c < C; ++c) xv[c] = L::load(x[c]);
        for (int r = 0; r < R; ++r) {
            const __m256 wv = L::load(w[r]);
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }

    static void run(int64_t k, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y, int64_t ldy) {
        __m256 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
        const uint8_t* wp[R];
        const uint8_t* xp[C];
        int64_t i = 0;
        for (; i + 8 <= k; i += 8) {
            for (int r = 0; r < R; ++r) {
                wp[r] = w + r * ws + i * L::kSize;
                if (i % 16 == 0) prefetch_ahead<16 * L::kSize>(wp[r]);
            }
            for (int c = 0; c < C; ++c) xp[c] = x + c * xs + i * L::kSize;
            step(wp, xp, acc);
        }
        if (i < k) {
            uint8_t wpad[R][8 * L::kSize], xpad[C][8 * L::kSize];
            for (int r = 0; r < R; ++r) {
                memset(wpad[r], 0, sizeof(wpad[r]));
                memcpy(wpad[r], w + r * ws + i * L::kSize, (k - i) * L::kSize);
                wp[r] = wpad[r];
            }
            for (int c = 0; c < C; ++c) {
                memset(xpad[c], 0, sizeof(xpad[c]));
                memcpy(xpad[c], x + c * xs + i * L::kSize, (k - i) * L::kSize);
                xp[c] = xpad[c];
            }
            step(wp, xp, acc);
        }
        if constexpr (R == 4) {
            for (int c = 0; c < C; ++c) _mm_storeu_ps(y + c * ldy, hsum8x4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
        } else {
            for (int r = 0; r < R; ++r)
                for (int c = 0; c < C; ++c) y[c * ldy + r] = hsum8(acc[r][c]);
        }
    }
};

template <int R, int C> using Q2KTile = KTile<KUnpack<Q2Unpack, sizeof(block_q2_K)>, R, C>;
template <int R, int C> using Q3KTile = KTile<KUnpack<Q3Unpack, sizeof(block_q3_K)>, R, C>;
template <int R, int C> using IQ4XSTile = KTile<KUnpack<IQ4XSUnpack, sizeof(block_iq4_xs)>, R, C>;
template <int R, int C> using F32Tile = FloatTile<F32Load, R, C>;
template <int R, int C> using F16Tile = FloatTile<F16Load, R, C>;
template <int R, int C> using BF16Tile = FloatTile<BF16Load, R, C>;

// The block-sequential types (bseq.h) are block-sequential here too: the 1 x 1
// dot and every tile are the reference fold, which bseq_avx2.cpp's panel kernels reproduce bit
// for bit; matmul runs those.
template <GGMLType T>
float bseq_dot(int64_t n, const void* w, const void* x) { return bseq::dot_ref(T, n, w, x); }

template <GGMLType T>
KernelSet make_bseq_set() {
    return make_tile_set<DotTile<&bseq_dot<T>>::template T, 1, 1>(Isa::AVX2);
}

}  // namespace avx2_impl
using namespace avx2_impl;

LLL_DEFINE_KERNEL_SET(avx2_q4_0, make_bseq_set<GGMLType::Q4_0>())
LLL_DEFINE_KERNEL_SET(avx2_q4_1, make_bseq_set<GGMLType::Q4_1>())
LLL_DEFINE_KERNEL_SET(avx2_q5_0, make_bseq_set<GGMLType::Q5_0>())
LLL_DEFINE_KERNEL_SET(avx2_q5_1, make_bseq_set<GGMLType::Q5_1>())
LLL_DEFINE_KERNEL_SET(avx2_q8_0, make_bseq_set<GGMLType::Q8_0>())
LLL_DEFINE_KERNEL_SET(avx2_q4_K, make_bseq_set<GGMLType::Q4_K>())
LLL_DEFINE_KERNEL_SET(avx2_q5_K, make_bseq_set<GGMLType::Q5_K>())
LLL_DEFINE_KERNEL_SET(avx2_q6_K, make_bseq_set<GGMLType::Q6_K>())
LLL_DEFINE_KERNEL_SET(avx2_q2_K, (make_tile_set<Q2KTile, 1, 4>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_q3_K, (make_tile_set<Q3KTile, 1, 4>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_f32, (make_tile_set<F32Tile, 4, 3>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_f16, (make_tile_set<F16Tile, 4, 3>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_bf16, (make_tile_set<BF16Tile, 4, 3>(Isa::AVX2)))
LLL_DEFINE_KERNEL_SET(avx2_iq4_nl, make_iq4nl_set())
LLL_DEFINE_KERNEL_SET(avx2_iq4_xs, (make_tile_set<IQ4XSTile, 1, 4>(Isa::AVX2)))

}  // namespace kern
}  // namespace lll

#endif
