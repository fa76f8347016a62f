// attention_ggml.cpp — attention in llama.cpp's exact float order (the "llama.cpp numerics" mode;
// model.h: Numerics), for its CPU backend without flash attention and with an F16 cache.
//
// llama.cpp computes softmax(scale * q.K^T + mask) . V as two F16 matrix products around a
// softmax, and which kernel runs a product depends on the batch: with two or more query tokens
// llamafile's tinyBLAS (one 16-lane FMA accumulator per output, then _mm512_reduce_add_ps), with
// one token ggml's vec_dot_f16 (four 16-lane accumulators over strides of 64, added 0+2, 1+3,
// then together, then reduced). Lane i always holds the elements whose index is i mod 16: head
// dims for q.k, key positions for p.V (a sequence's cache cells are its positions). The softmax
// (ggml_compute_forward_soft_max_f32): scores times scale, ggml's vector expf of (s - max), each
// 16-position group reduced in float and summed in double, times (float)(1 / sum). q and the
// probabilities are rounded to F16 before their products, as ggml converts a product's F32
// operand to its F16 partner's type. Keys outside the causal / sliding window have probability
// 0 and are skipped: in llama.cpp they add exact zeros.
#include "backends/cpu/attention.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/fp16.h"
#include "backends/cpu/ggml_numerics/ggml_math.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace lll {

namespace {

constexpr int kL = 16;   // lanes

inline float f16r(float x) { return fp16_to_f32(f32_to_fp16(x)); }

// ggml_vec_dot_f16 over n terms a[i] * b[i] given as term(i) operands.
template <class A, class B>
float vec_dot_f16_order(int n, A a, B b) {
    float sum[4][kL] = {};
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < kL; ++l) sum[j][l] = fmaf(a(i + 16 * j + l), b(i + 16 * j + l), sum[j][l]);
    for (int l = 0; l < kL; ++l) sum[0][l] += sum[2][l], sum[1][l] += sum[3][l];
    for (int l = 0; l < kL; ++l) sum[0][l] += sum[1][l];
    double s = ggml_order::reduce16(sum[0]);
    for (int i = np; i < n; ++i) s += (double)(a(i) * b(i));
    return (float)s;
}

// tinyBLAS over n terms (n % 16 == 0): one 16-lane accumulator, then reduce16.
template <class A, class B>
float tinyblas_order(int n, A a, B b) {
    float acc[kL] = {};
    for (int i = 0; i < n; i += kL)
        for (int l = 0; l < kL; ++l) acc[l] = fmaf(a(i + l), b(i + l), acc[l]);
    return ggml_order::reduce16(acc);
}

struct RowScratch {
    std::vector<float> q, w, p;   // [hd], [pos + 1] scores / exps, [pos + 1] F16-rounded probabilities
    std::vector<const fp16_t*> k, v;
};

// What every row of one attention call shares.
struct Call {
    const KVCache& kv;
    int layer;
    const Batch& b;
    int hd;
    float scale;
    int window;
    bool batched;   // two or more tokens in the batch: llama.cpp's tinyBLAS order, else vec_dot_f16's
    float softcap;  // 0 = none
};

// One (token, head) row: its position, first visible key, and the K / V slots of its keys.
struct Row {
    int32_t pos, start;
    const int32_t* table;
    int kv_head;
    Row(const Call& c, int64_t t, int kv_head_)
        : pos(c.b.positions[t]), start(attn_detail::first_visible(pos, c.window)),
          table(c.b.block_tables + (int64_t)c.b.seq_of_token[t] * c.b.max_blocks), kv_head(kv_head_) {}
    const fp16_t* k(const Call& c, int32_t p) const {
        return c.kv.k_row(c.layer, table[p / c.kv.block_size()], p % c.kv.block_size(), kv_head);
    }
    const fp16_t* v(const Call& c, int32_t p) const {
        return c.kv.v_row(c.layer, table[p / c.kv.block_size()], p % c.kv.block_size(), kv_head);
    }
};

// One row in llama.cpp's order, its two products given as qk(q, k, hd, batched) -> score and
// pv(s, start, pos, out) (the scalar statements below, or the AVX2 ones), the softmax shared.
template <class QK, class PV>
void attend_row(const Call& c, const float* q_row, float* out, int64_t t, int kv_head, RowScratch& s, QK qk, PV pv) {
    const Row row(c, t, kv_head);
    const int32_t pos = row.pos, start = row.start;
    const int hd = c.hd;
    s.q.resize(hd), s.w.assign(pos + 1, 0.0f), s.p.assign(pos + 1, 0.0f), s.k.resize(pos + 1), s.v.resize(pos + 1);
    for (int d = 0; d < hd; ++d) s.q[d] = f16r(q_row[d]);
    float max = -INFINITY;
    for (int32_t p = start; p <= pos; ++p) {
        s.k[p] = row.k(c, p);
        s.v[p] = row.v(c, p);
        s.w[p] = softcap_score(qk(s.q.data(), s.k[p], hd, c.batched) * c.scale, c.softcap);
        max = std::max(max, s.w[p]);
    }
    double sum = 0.0;
    for (int32_t c0 = start / kL * kL; c0 <= pos; c0 += kL) {   // 16-position groups, in order
        float e[kL] = {};
        for (int l = 0; l < kL; ++l) {
            const int32_t p = c0 + l;
            if (p >= start && p <= pos) e[l] = s.w[p] = ggml_order::expf_v(s.w[p] - max);
        }
        sum += (double)ggml_order::reduce16(e);
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t p = start; p <= pos; ++p) s.p[p] = f16r(s.w[p] * inv);
    pv(s, start, pos, hd, c.batched, out);
}

float qk_ref(const float* q, const fp16_t* k, int hd, bool batched) {
    auto kk = [k](int i) { return fp16_to_f32(k[i]); };
    auto qq = [q](int i) { return q[i]; };
    return batched && hd % 16 == 0 ? tinyblas_order(hd, kk, qq) : vec_dot_f16_order(hd, kk, qq);
}

// p.V over positions: lane = position mod 16; positions outside [start, pos] contribute 0.
void pv_ref(const RowScratch& s, int32_t start, int32_t pos, int hd, bool batched, float* out) {
    const int n = (pos / 64 + 1) * 64;   // whole 64-groups, as the cache padding makes them in llama.cpp
    const float* pr = s.p.data();
    for (int d = 0; d < hd; ++d) {
        auto vv = [&](int i) { return i >= start && i <= pos ? fp16_to_f32(s.v[i][d]) : 0.0f; };
        auto pp = [&](int i) { return i >= start && i <= pos ? pr[i] : 0.0f; };
        out[d] = batched && hd % 4 == 0 ? tinyblas_order(n, vv, pp) : vec_dot_f16_order(n, vv, pp);
    }
}

void attend_row_ref(const Call& c, const float* q_row, float* out, int64_t t, int kv_head, RowScratch& s) {
    attend_row(c, q_row, out, t, kv_head, s, qk_ref, pv_ref);
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LLL_ATTN_GGML_AVX2 1
// The 16 lanes as two ymm halves (lanes 0-7, 8-15): each lane's FMA chain is the same
// operations in the same order as the scalar statement and the AVX-512 kernel, so the same bits.
struct Lanes16 {
    __m256 lo, hi;
    static Lanes16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static Lanes16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
    static Lanes16 load_h(const fp16_t* p) {
        return {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(p + 8)))};
    }
    void store(float* p) const { _mm256_storeu_ps(p, lo), _mm256_storeu_ps(p + 8, hi); }
    Lanes16 fma(Lanes16 a, Lanes16 b) const { return {_mm256_fmadd_ps(a.lo, b.lo, lo), _mm256_fmadd_ps(a.hi, b.hi, hi)}; }
    Lanes16 operator+(Lanes16 o) const { return {_mm256_add_ps(lo, o.lo), _mm256_add_ps(hi, o.hi)}; }
    float reduce() const {
        float a[kL];
        store(a);
        return ggml_order::reduce16(a);
    }
};

float qk_avx2(const float* q, const fp16_t* k, int hd, bool batched) {
    if (batched && hd % kL == 0) {   // tinyBLAS
        Lanes16 acc = Lanes16::zero();
        for (int i = 0; i < hd; i += kL) acc = acc.fma(Lanes16::load_h(k + i), Lanes16::load(q + i));
        return acc.reduce();
    }
    Lanes16 s[4] = {Lanes16::zero(), Lanes16::zero(), Lanes16::zero(), Lanes16::zero()};   // vec_dot_f16
    const int np = hd & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j) s[j] = s[j].fma(Lanes16::load_h(k + i + 16 * j), Lanes16::load(q + i + 16 * j));
    double sum = ((s[0] + s[2]) + (s[1] + s[3])).reduce();
    for (int i = np; i < hd; ++i) sum += (double)(fp16_to_f32(k[i]) * q[i]);
    return (float)sum;
}

// p.V for 16 output dims at a time, as pv_avx512: slot = position mod 16 (tinyBLAS) or mod 64
// (vec_dot_f16), each slot a sequential FMA chain over its positions, then the lane tree.
void pv_avx2(const RowScratch& s, int32_t start, int32_t pos, int hd, bool batched, float* out) {
    if (hd % kL) return pv_ref(s, start, pos, hd, batched, out);
    const bool tiny = batched && hd % 4 == 0;
    const int slots = tiny ? 16 : 64;
    Lanes16 acc[64];
    for (int d0 = 0; d0 < hd; d0 += kL) {
        for (int j = 0; j < slots; ++j) acc[j] = Lanes16::zero();
        for (int32_t p = start; p <= pos; ++p) {
            const __m256 pp = _mm256_set1_ps(s.p[p]);
            acc[p % slots] = acc[p % slots].fma(Lanes16::load_h(s.v[p] + d0), Lanes16{pp, pp});
        }
        if (!tiny)
            for (int l = 0; l < kL; ++l) acc[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
        Lanes16 t[8], u[4];
        for (int i = 0; i < 8; ++i) t[i] = acc[i + 8] + acc[i];
        for (int i = 0; i < 4; ++i) u[i] = t[i + 4] + t[i];
        ((u[0] + u[2]) + (u[1] + u[3])).store(out + d0);
    }
}
#else
#define LLL_ATTN_GGML_AVX2 0
#endif

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__F16C__)
#define LLL_ATTN_GGML_AVX512 1
inline __m512 load16h(const fp16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }
inline __m512 round16h(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
inline float reduce16v(__m512 v) {
    alignas(64) float a[kL];
    _mm512_store_ps(a, v);
    return ggml_order::reduce16(a);
}

// q.k for one key, 16 lanes over d: tinyBLAS (one accumulator) or vec_dot_f16 (four, stride 64).
inline float qk_avx512(const float* q, const fp16_t* k, int hd, bool tiny) {
    if (tiny) {
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += kL) acc = _mm512_fmadd_ps(load16h(k + i), _mm512_load_ps(q + i), acc);
        return reduce16v(acc);
    }
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const int np = hd & ~63;
    for (int i = 0; i < np; i += 64) {
        s0 = _mm512_fmadd_ps(load16h(k + i), _mm512_load_ps(q + i), s0);
        s1 = _mm512_fmadd_ps(load16h(k + i + 16), _mm512_load_ps(q + i + 16), s1);
        s2 = _mm512_fmadd_ps(load16h(k + i + 32), _mm512_load_ps(q + i + 32), s2);
        s3 = _mm512_fmadd_ps(load16h(k + i + 48), _mm512_load_ps(q + i + 48), s3);
    }
    double s = reduce16v(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
    for (int i = np; i < hd; ++i) s += (double)(fp16_to_f32(k[i]) * q[i]);
    return (float)s;
}

// p.V for 16 output dims [d0, d0 + 16): slot = position mod 16 (tinyBLAS) or mod 64
// (vec_dot_f16's four accumulators), each slot a sequential FMA chain over its positions.
void pv_avx512(const RowScratch& s, int32_t start, int32_t pos, int d0, bool tiny, float* out) {
    alignas(64) float acc[64][kL];
    const int slots = tiny ? 16 : 64;
    for (int j = 0; j < slots; ++j) _mm512_store_ps(acc[j], _mm512_setzero_ps());
    for (int32_t p = start; p <= pos; ++p) {
        float* a = acc[p % slots];
        _mm512_store_ps(a, _mm512_fmadd_ps(load16h(s.v[p] + d0), _mm512_set1_ps(s.p[p]), _mm512_load_ps(a)));
    }
    // acc[slot][dim] -> lanes per dim: for tinyBLAS the 16 slots are the reduce16 lanes; for
    // vec_dot_f16 the four 16-slot accumulators are first added (0 + 2, 1 + 3, then together).
    if (!tiny)
        for (int l = 0; l < kL; ++l) {
            const __m512 a02 = _mm512_add_ps(_mm512_load_ps(acc[l]), _mm512_load_ps(acc[32 + l]));
            const __m512 a13 = _mm512_add_ps(_mm512_load_ps(acc[16 + l]), _mm512_load_ps(acc[48 + l]));
            _mm512_store_ps(acc[l], _mm512_add_ps(a02, a13));
        }
    __m512 t[8], u[4];
    for (int i = 0; i < 8; ++i) t[i] = _mm512_add_ps(_mm512_load_ps(acc[i + 8]), _mm512_load_ps(acc[i]));
    for (int i = 0; i < 4; ++i) u[i] = _mm512_add_ps(t[i + 4], t[i]);
    _mm512_storeu_ps(out + d0, _mm512_add_ps(_mm512_add_ps(u[0], u[2]), _mm512_add_ps(u[1], u[3])));
}

// attend_row_ref's operations, 16 lanes at a time (head_dim % 16 == 0).
void attend_row_avx512(const Call& c, const float* q_row, float* out, int64_t t, int kv_head, RowScratch& s) {
    const Row row(c, t, kv_head);
    const int32_t pos = row.pos, start = row.start;
    const int hd = c.hd;
    const int32_t n16 = (pos / kL + 1) * kL;
    s.q.resize(hd + kL), s.w.resize(n16), s.p.resize(n16), s.k.resize(pos + 1), s.v.resize(pos + 1);
    float* q = (float*)(((uintptr_t)s.q.data() + 63) & ~(uintptr_t)63);
    for (int d = 0; d < hd; d += kL) _mm512_store_ps(q + d, round16h(_mm512_loadu_ps(q_row + d)));
    float max = -INFINITY;
    for (int32_t p = start; p <= pos; ++p) {
        s.k[p] = row.k(c, p);
        s.v[p] = row.v(c, p);
        s.w[p] = softcap_score(qk_avx512(q, s.k[p], hd, c.batched) * c.scale, c.softcap);
        max = std::max(max, s.w[p]);
    }
    double sum = 0.0;
    for (int32_t c0 = start / kL * kL; c0 <= pos; c0 += kL) {
        const uint32_t lo = (uint32_t)std::max(0, start - c0), hi = (uint32_t)std::min(kL, pos - c0 + 1);
        const __mmask16 valid = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
        const __m512 w = _mm512_maskz_loadu_ps(valid, &s.w[c0]);
        const __m512 e = _mm512_maskz_mov_ps(valid, ggml_order::expf_v16(_mm512_sub_ps(w, _mm512_set1_ps(max))));
        _mm512_mask_storeu_ps(&s.w[c0], valid, e);
        sum += (double)reduce16v(e);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (int32_t c0 = start / kL * kL; c0 <= pos; c0 += kL)
        _mm512_storeu_ps(&s.p[c0], round16h(_mm512_mul_ps(_mm512_loadu_ps(&s.w[c0]), inv)));
    for (int d0 = 0; d0 < hd; d0 += kL) pv_avx512(s, start, pos, d0, c.batched, out);
}
#else
#define LLL_ATTN_GGML_AVX512 0
#endif

}  // namespace

void attention_ggml(ThreadPool& pool, const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                    int n_head, int n_head_kv, int head_dim, float scale, int window, float softcap,
                    AttnKernel kernel) {
    check_attention_call(kv, b, n_head, n_head_kv, head_dim, window);   // every index below relies on it
    if (!kv.is_f16())
        throw std::invalid_argument("attention: llama.cpp numerics read an f16 KV cache only (this one is " +
                                    std::string(cache_type_name(kv.types().k)) + "/" +
                                    cache_type_name(kv.types().v) + ")");
    const int64_t rows = b.n_tokens * n_head;
    const int group = n_head / n_head_kv;
    const Call call{kv, layer, b, head_dim, scale, window, b.n_tokens >= 2, softcap};
    // Every path gives the scalar statement's bits; the AVX2 one takes any head_dim.
    const AttnKernel path = pick_attention_kernel(kernel, head_dim % kL == 0, true);
    std::atomic<int64_t> next{0};
    auto work = [&](int, int) {
        thread_local RowScratch s;
        for (int64_t r; (r = next.fetch_add(1, std::memory_order_relaxed)) < rows;) {
            const int64_t t = r / n_head;
            const int kvh = (int)(r % n_head) / group;
            const float* qr = q + r * head_dim;
            float* o = out + r * head_dim;
            switch (path) {
#if LLL_ATTN_GGML_AVX512
                case AttnKernel::AVX512: attend_row_avx512(call, qr, o, t, kvh, s); break;
#endif
#if LLL_ATTN_GGML_AVX2
                case AttnKernel::AVX2: attend_row(call, qr, o, t, kvh, s, qk_avx2, pv_avx2); break;
#endif
                default: attend_row_ref(call, qr, o, t, kvh, s);
            }
        }
    };
    if (pool.size() > 1 && rows > 1) pool.run(work);
    else work(0, 1);
}

}  // namespace lll
