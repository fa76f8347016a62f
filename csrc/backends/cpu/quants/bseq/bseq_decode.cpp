// bseq_decode.cpp — block-sequential matmul (bseq.h) for a few activation rows (decode steps),
// straight from the GGUF block layout: no packed panel.
//
// For each of the 16 weight rows of a panel, two consecutive 32-element units are unpacked into
// one 64-byte vector and multiplied with the activation's 64 quants by one vpdpbusd (lane sums of
// 4 products). A reduction tree then adds lanes across the 16 rows so that each unit's exact
// integer sum lands in the row's own lane — the very integers the packed-panel kernels compute —
// and the float fold runs with the same instructions as kernel_legacy / kernel_kquant. Decode
// streams weights from memory; this keeps the work per weight byte small enough to do so at
// the memory's speed.
#include <stdexcept>

#include "backends/cpu/quants/bseq/bseq_panel.h"
#include "backends/cpu/quants/dot/dot_impl.h"

#if LLL_BUILD_AVX512
#include "backends/cpu/quants/bseq/bseq_simd.h"

namespace lll {
namespace bseq {
namespace {
using namespace simd;

// ---- the 64 quants of units 2j and 2j + 1 of one weight row, unsigned, natural order ---------

inline __m512i nibbles_lo_hi(__m512i q) {   // bytes 0-15, 32-47: low nibbles; 16-31, 48-63: high
    return _mm512_mask_blend_epi8(0xFFFF0000FFFF0000ull, lo4(q), hi4(q));
}
inline __m512i nibbles_lo_hi_32(__m512i q) {   // bytes 0-31: low nibbles; 32-63: high
    return _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull, lo4(q), hi4(q));
}

// vpermb table: byte i = qs byte i % 16 of block i / 32 (each block's 16 qs bytes twice).
template <int kBytes, int kQs>
struct PairIndex {
    struct Table { alignas(64) uint8_t v[64]; };
    static constexpr Table make() {
        Table t{};
        for (int i = 0; i < 64; ++i) t.v[i] = (uint8_t)((i / 32) * kBytes + kQs + i % 16);
        return t;
    }
    static constexpr Table table = make();
};

// Legacy 4/5-bit blocks: qs (16 bytes) at kQs, qh (4 bytes) at kQh (< 0: none).
template <int kBytes, int kQs, int kQh>
inline __m512i pair_legacy4(const uint8_t* row, int64_t j, bool both) {
    const uint8_t* p = row + 2 * j * kBytes;
    const int n = both ? 2 * kBytes : kBytes;
    const __m512i raw = _mm512_maskz_loadu_epi8(n >= 64 ? ~0ull : (1ull << n) - 1, p);
    const __m512i idx = _mm512_load_si512(PairIndex<kBytes, kQs>::table.v);
    __m512i q = nibbles_lo_hi(_mm512_permutexvar_epi8(idx, raw));   // a missing 2nd block reads as 0
    if constexpr (kQh >= 0) {
        uint32_t h0, h1 = 0;
        memcpy(&h0, p + kQh, 4);
        if (both) memcpy(&h1, p + kBytes + kQh, 4);
        q = _mm512_mask_add_epi8(q, (__mmask64)(h0 | ((uint64_t)h1 << 32)), q, _mm512_set1_epi8(0x10));
    }
    return q;
}

inline __m512i pair_q8_0(const uint8_t* row, int64_t j, bool both) {
    const uint8_t* p = row + 2 * j * sizeof(block_q8_0);
    const __m256i a = _mm256_loadu_si256((const __m256i*)(p + 2));
    const __m256i b = both ? _mm256_loadu_si256((const __m256i*)(p + sizeof(block_q8_0) + 2)) : _mm256_setzero_si256();
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    return _mm512_maskz_xor_epi32(both ? 0xFFFF : 0x00FF, q, _mm512_set1_epi8((char)0x80));
}

// K-quants: pair jp (0..3) of super-block g.
template <bool kQ5>
inline __m512i pair_k4(const uint8_t* row, int64_t g, int jp) {
    constexpr int kBytes = kQ5 ? sizeof(block_q5_K) : sizeof(block_q4_K), kQs = kQ5 ? 48 : 16;
    const uint8_t* p = row + g * kBytes;
    __m512i q = nibbles_lo_hi_32(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(p + kQs + 32 * jp))));
    if constexpr (kQ5) {
        const __m256i qh = _mm256_loadu_si256((const __m256i*)(p + 16));
        const __mmask64 b0 = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << (2 * jp))));
        const __mmask64 b1 = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(2 << (2 * jp))));
        q = _mm512_mask_add_epi8(q, b0 | (b1 << 32), q, _mm512_set1_epi8(0x10));
    }
    return q;
}

inline __m512i pair_q6_K(const uint8_t* row, int64_t g, int jp) {
    const uint8_t* p = row + g * sizeof(block_q6_K);
    const int half = jp / 2, upper = jp % 2;                   // quarters 0,1 or 2,3 of the half
    const __m512i ql = _mm512_loadu_si512(p + 64 * half);
    const __m512i lo = upper ? hi4(ql) : lo4(ql);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(p + 128 + 32 * half)));
    const int s = 4 * upper;                                  // quarter q uses bits 2q, 2q + 1
    const __m512i h = _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull, _mm512_srli_epi16(qh, s), _mm512_srli_epi16(qh, s + 2));
    return _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(3)), 4));
}

// ---- lanes of 16 rows -> per-row unit sums --------------------------------------------------

inline __m512i idx_even() { return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); }
inline __m512i idx_odd() { return _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31); }

// Lanes 0-7: sums of a's adjacent lane pairs; lanes 8-15: b's.
inline __m512i pair_sum(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, idx_even(), b), _mm512_permutex2var_epi32(a, idx_odd(), b));
}

// v[r]: row r's lanes, 8 per unit. After: f[k] lane r = sum of v[r]'s lanes of unit k.
inline void units_to_lanes(__m512i* v, __m512i* f) {
    for (int s = 0; s < 8; ++s) v[s] = pair_sum(v[2 * s], v[2 * s + 1]);
    for (int s = 0; s < 4; ++s) v[s] = pair_sum(v[2 * s], v[2 * s + 1]);
    for (int s = 0; s < 2; ++s) v[s] = pair_sum(v[2 * s], v[2 * s + 1]);
    f[0] = _mm512_permutex2var_epi32(v[0], idx_even(), v[1]);   // lane 2i + k of v[q]: row 8q + i, unit k
    f[1] = _mm512_permutex2var_epi32(v[0], idx_odd(), v[1]);
}

// Q6_K: 16-element halves. After: f[2k + h] lane r = sum over half h of unit k of row r.
inline void halves_to_lanes(__m512i* v, __m512i* f) {
    for (int s = 0; s < 8; ++s) v[s] = pair_sum(v[2 * s], v[2 * s + 1]);
    for (int s = 0; s < 4; ++s) v[s] = pair_sum(v[2 * s], v[2 * s + 1]);   // lane 4i + s of v[t]: row 4t + i
    for (int s = 0; s < 4; ++s) {
        alignas(64) int32_t idx[16] = {};
        for (int r = 0; r < 8; ++r) idx[r] = (r < 4 ? 0 : 16) + 4 * (r % 4) + s;
        const __m512i a = _mm512_permutex2var_epi32(v[0], _mm512_load_si512(idx), v[1]);   // rows 0-7
        const __m512i b = _mm512_permutex2var_epi32(v[2], _mm512_load_si512(idx), v[3]);   // rows 8-15
        f[s] = _mm512_inserti64x4(a, _mm512_castsi512_si256(b), 1);
    }
}

inline __m512i act_pair(const int8_t* x, int64_t j, bool both) {
    return _mm512_maskz_loadu_epi8(both ? ~0ull : 0xFFFFFFFFull, x + 64 * j);
}

// ---- kernels: one activation row x one panel ------------------------------------------------

// The panel's rows are contiguous, and so is the next panel: while the units of this panel are
// walked, the next panel's bytes are prefetched in step (one panel ahead: 5-45 KB here), which is
// what streaming needs; a fixed distance ahead inside each row would land in rows this panel is
// reading at the same time.
struct Prefetcher {
    const char* next;
    size_t per_step, end;
    Prefetcher(const Rows& R, size_t ws, int64_t steps) {
        next = (const char*)R.p[0] + kPanel * ws;
        end = kPanel * ws;
        per_step = ((end + steps - 1) / steps + 63) & ~(size_t)63;
    }
    void step(int64_t i) const {
        for (size_t off = i * per_step, e = std::min(end, off + per_step); off < e; off += 64)
            __builtin_prefetch(next + off, 0, 3);
    }
};

template <int kBytes, int kQs, int kQh, bool kMin, bool kQ8>
__m512 direct_legacy(const Rows& R, int64_t nu, const ActPack& a, int64_t m) {
    const int8_t* x = a.q + m * a.K;
    const Prefetcher pf(R, (size_t)nu * kBytes, (nu + 1) / 2);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; 2 * j < nu; ++j) {
        const bool both = 2 * j + 1 < nu;
        const __m512i xv = act_pair(x, j, both);
        __m512i v[16], f[2];
        if (m == 0) pf.step(j);
        for (int r = 0; r < kPanel; ++r) {
            const __m512i w = kQ8 ? pair_q8_0(R.p[r], j, both) : pair_legacy4<kBytes, kQs, kQh>(R.p[r], j, both);
            v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xv);
        }
        units_to_lanes(v, f);
        for (int k = 0; k < (both ? 2 : 1); ++k) {   // same operations as kernel_legacy
            const int64_t u = 2 * j + k, i = m * nu + u;
            const __m512i dm = R.gather((size_t)u * kBytes);
            __m512i s = f[k];
            if constexpr (!kMin) s = _mm512_add_epi32(s, _mm512_set1_epi32(a.nbias[i]));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(f16_low(dm), _mm512_set1_ps(a.d[i])), acc);
            if constexpr (kMin) acc = _mm512_fmadd_ps(f16_high(dm), _mm512_set1_ps(a.s[i]), acc);
        }
    }
    return acc;
}

template <int kType>   // 4: Q4_K, 5: Q5_K, 6: Q6_K
__m512 direct_kquant(const Rows& R, int64_t nu, const ActPack& a, int64_t m) {
    constexpr int kBytes = kType == 4 ? sizeof(block_q4_K) : kType == 5 ? sizeof(block_q5_K) : sizeof(block_q6_K);
    const int8_t* x = a.q + m * a.K;
    const int64_t ng = nu / 8;
    const Prefetcher pf(R, (size_t)ng * kBytes, ng);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
        const size_t base = (size_t)g * kBytes;
        if (m == 0) pf.step(g);
        __m512i s4[4], dm;
        for (int i = 0; i < (kType == 6 ? 4 : 3); ++i) s4[i] = R.gather(base + (kType == 6 ? 192 : 4) + 4 * i);
        dm = R.gather(kType == 6 ? base + 206 : base);
        __m512i isum = _mm512_setzero_si512(), aux = _mm512_setzero_si512();
        for (int jp = 0; jp < 4; ++jp) {
            const __m512i xv = act_pair(x + g * QK_K, jp, true);
            __m512i v[16], f[4];
            for (int r = 0; r < kPanel; ++r) {
                const __m512i w = kType == 6 ? pair_q6_K(R.p[r], g, jp) : pair_k4<kType == 5>(R.p[r], g, jp);
                v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xv);
            }
            if constexpr (kType == 6) halves_to_lanes(v, f);
            else units_to_lanes(v, f);
            for (int k = 0; k < 2; ++k) {             // integer terms of kernel_kquant
                const int j = 2 * jp + k;
                const int32_t bs = a.bsum[m * nu + 8 * g + j];
                if constexpr (kType == 6) {
                    __m512i sc[2];
                    for (int h = 0; h < 2; ++h) {
                        const int sb = 2 * j + h;
                        sc[h] = q6_scale(s4, sb);
                    }
                    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sc[0], f[2 * k]));
                    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sc[1], f[2 * k + 1]));
                    const __m512i pair = int16_pair(sc[0], sc[1]);
                    aux = _mm512_dpwssd_epi32(aux, pair, _mm512_set1_epi32(bs));
                } else {
                    __m512i sc, mn;
                    k4_scales(s4[0], s4[1], s4[2], j, &sc, &mn);
                    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sc, f[k]));
                    aux = _mm512_dpwssd_epi32(aux, int16_pair(mn, mn), _mm512_set1_epi32(bs));
                }
            }
        }
        const __m512 dx = _mm512_set1_ps(a.d[m * ng + g]);   // float fold of kernel_kquant
        if constexpr (kType == 6) {
            isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(aux, 5));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(f16_high(dm), dx), acc);
        } else {
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(f16_low(dm), dx), acc);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(aux), neg(_mm512_mul_ps(f16_high(dm), dx)), acc);
        }
    }
    return acc;
}

__m512 direct_row(GGMLType t, const Rows& R, int64_t nu, const ActPack& a, int64_t m) {
    switch (t) {
        case GGMLType::Q4_0: return direct_legacy<sizeof(block_q4_0), 2, -1, false, false>(R, nu, a, m);
        case GGMLType::Q4_1: return direct_legacy<sizeof(block_q4_1), 4, -1, true, false>(R, nu, a, m);
        case GGMLType::Q5_0: return direct_legacy<sizeof(block_q5_0), 6, 2, false, false>(R, nu, a, m);
        case GGMLType::Q5_1: return direct_legacy<sizeof(block_q5_1), 8, 4, true, false>(R, nu, a, m);
        case GGMLType::Q8_0: return direct_legacy<sizeof(block_q8_0), 2, -1, false, true>(R, nu, a, m);
        case GGMLType::Q4_K: return direct_kquant<4>(R, nu, a, m);
        case GGMLType::Q5_K: return direct_kquant<5>(R, nu, a, m);
        case GGMLType::Q6_K: return direct_kquant<6>(R, nu, a, m);
        default: throw std::logic_error("bseq::direct_row: not a block-sequential type (bseq.h kBseqTypes)");
    }
}

}  // namespace

void matmul_direct(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1,
                   const ActPack& a, float* Y, int64_t ldy) {
    const int64_t nu = a.K / 32;
    for (int64_t p = n0; p < n1; p += kPanel) {
        const int nvalid = (int)std::min<int64_t>(kPanel, N - p);
        const Rows R(W + p * ws, ws, nvalid);
        for (int64_t m = 0; m < a.M; ++m)
            _mm512_mask_storeu_ps(Y + m * ldy + p, (__mmask16)((1u << nvalid) - 1), direct_row(t, R, nu, a, m));
    }
}

}  // namespace bseq
}  // namespace lll

#endif
