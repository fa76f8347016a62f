// ggml_legacy.cpp — see ggml_legacy.h.
#include "backends/cpu/ggml_numerics/ggml_order.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/ggml_numerics/ggml_math.h"
#include "backends/cpu/quants/dot/dot_impl.h"

namespace lll {
namespace ggml_order {

bool legacy_supported(GGMLType t) {
    return t == GGMLType::Q4_0 || t == GGMLType::Q4_1 || t == GGMLType::Q5_0 || t == GGMLType::Q5_1 ||
           t == GGMLType::Q8_0;
}

namespace {

inline float h2f(fp16_t h) { return fp16_to_f32(h); }

// The 32 weight quants of a block as ggml feeds them to the integer dot product: element e of
// the block, signed (bias removed) except for the types with a min, where they stay unsigned.
inline int fifth_bit(const uint8_t* qh, int e) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return (int)((h >> e) & 1) << 4;
}
template <class WB> struct Unpack;
template <> struct Unpack<block_q4_0> {
    static void get(const block_q4_0& b, int8_t* q) {
        for (int j = 0; j < 16; ++j) q[j] = (int8_t)((b.qs[j] & 15) - 8), q[j + 16] = (int8_t)((b.qs[j] >> 4) - 8);
    }
};
template <> struct Unpack<block_q4_1> {
    static void get(const block_q4_1& b, int8_t* q) {
        for (int j = 0; j < 16; ++j) q[j] = (int8_t)(b.qs[j] & 15), q[j + 16] = (int8_t)(b.qs[j] >> 4);
    }
};
template <> struct Unpack<block_q5_0> {
    static void get(const block_q5_0& b, int8_t* q) {
        for (int j = 0; j < 16; ++j) {
            q[j] = (int8_t)(((b.qs[j] & 15) | fifth_bit(b.qh, j)) - 16);
            q[j + 16] = (int8_t)(((b.qs[j] >> 4) | fifth_bit(b.qh, j + 16)) - 16);
        }
    }
};
template <> struct Unpack<block_q5_1> {
    static void get(const block_q5_1& b, int8_t* q) {
        for (int j = 0; j < 16; ++j) {
            q[j] = (int8_t)((b.qs[j] & 15) | fifth_bit(b.qh, j));
            q[j + 16] = (int8_t)((b.qs[j] >> 4) | fifth_bit(b.qh, j + 16));
        }
    }
};
template <> struct Unpack<block_q8_0> {
    static void get(const block_q8_0& b, int8_t* q) { memcpy(q, b.qs, 32); }
};

template <class WB> constexpr bool kHasMin = false;
template <> constexpr bool kHasMin<block_q4_1> = true;
template <> constexpr bool kHasMin<block_q5_1> = true;

template <class WB, class XB>
float dot_ref(int64_t n, const void* vw, const void* vx) {
    const WB* w = (const WB*)vw;
    const XB* x = (const XB*)vx;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, summs = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < n / 32; ++b) {
        Unpack<WB>::get(w[b], q);
        const float dd = h2f(w[b].d) * h2f(x[b].d);
        if constexpr (kHasMin<WB>) summs = fmaf(h2f(w[b].m), h2f(x[b].s), summs);
        for (int j = 0; j < 8; ++j) {
            int32_t s = 0;
            for (int e = 4 * j; e < 4 * j + 4; ++e) s += (int32_t)q[e] * x[b].qs[e];
            acc[j] = fmaf(dd, (float)s, acc[j]);
        }
    }
    return hsum8(acc) + summs;
}

typedef float (*DotFn)(int64_t, const void*, const void*);

DotFn ref_fn(GGMLType t) {
    switch (t) {
        case GGMLType::Q4_0: return dot_ref<block_q4_0, block_q8_0>;
        case GGMLType::Q4_1: return dot_ref<block_q4_1, block_q8_1>;
        case GGMLType::Q5_0: return dot_ref<block_q5_0, block_q8_0>;
        case GGMLType::Q5_1: return dot_ref<block_q5_1, block_q8_1>;
        case GGMLType::Q8_0: return dot_ref<block_q8_0, block_q8_0>;
        default: return nullptr;
    }
}

// Decode streams the GGUF rows from memory once per token: the SIMD paths prefetch 8 KiB ahead
// (the hardware prefetchers alone left one core at well under half the rate).
constexpr size_t kPrefetchAhead = 8192;

typedef void (*RowsFn)(int64_t, const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, const float*,
                       const int32_t*, int64_t, float*, int64_t);
typedef void (*ActFn)(const uint8_t*, size_t, int64_t, int64_t, float*, int32_t*);
struct FastFns { RowsFn rows; ActFn act; };

#if LLL_BUILD_AVX2
inline __m256i nibbles(const uint8_t* qs) {   // low nibbles -> bytes 0..15, high -> 16..31
    const __m128i v = _mm_loadu_si128((const __m128i*)qs);
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// Activation block scales as floats, converted once per matmul instead of once per weight row:
// xs[2 * (m * nb + b)] = d, [.. + 1] = s (Q8_1's d * sum of quants; 0 for Q8_0).
template <class XB>
void act_scales(const uint8_t* X, size_t xrb, int64_t M, int64_t nb, float* xs) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t b = 0; b < nb; ++b) {
            const XB& xb = ((const XB*)(X + m * xrb))[b];
            xs[2 * (m * nb + b)] = _cvtsh_ss(xb.d);
            if constexpr (sizeof(XB) == sizeof(block_q8_1)) xs[2 * (m * nb + b) + 1] = _cvtsh_ss(((const block_q8_1&)xb).s);
            else xs[2 * (m * nb + b) + 1] = 0.0f;
        }
}

#endif

#if LLL_BUILD_AVX512
inline __m256i fifth_bits(const uint8_t* qh) {   // byte e = 16 when bit e of qh is set
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(16));
}
// The 32 quants of a block in a ymm as stored, unsigned (q + bias for the types with a bias),
// and the bias: the kernel starts each lane's dot product at -bias * (sum of its 4 activation
// quants), which leaves exactly sum (q - bias) x, the integer ggml's sign trick computes.
template <class WB> constexpr int kBias = 0;
template <> constexpr int kBias<block_q4_0> = 8;
template <> constexpr int kBias<block_q5_0> = 16;
template <> constexpr int kBias<block_q8_0> = 128;
template <class WB> inline __m256i unpack256(const WB& b) {
    if constexpr (std::is_same_v<WB, block_q8_0>)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), _mm256_set1_epi8((char)0x80));
    else if constexpr (std::is_same_v<WB, block_q5_0> || std::is_same_v<WB, block_q5_1>)
        return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh));
    else return nibbles(b.qs);   // Q4_0, Q4_1
}

// -bias * (sum of each 4-quant lane) of every activation block: init[8 * (m * nb + b) + j].
template <class WB, class XB>
void act_lane_init(const uint8_t* X, size_t xrb, int64_t M, int64_t nb, int32_t* init) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t b = 0; b < nb; ++b) {
            const XB& xb = ((const XB*)(X + m * xrb))[b];
            for (int j = 0; j < 8; ++j)
                init[8 * (m * nb + b) + j] = -kBias<WB> * (xb.qs[4 * j] + xb.qs[4 * j + 1] + xb.qs[4 * j + 2] + xb.qs[4 * j + 3]);
        }
}

// Two weight rows against C activation rows, one row per 256-bit half of a zmm: each half runs
// ggml's 8 lanes (per block one VNNI dot product of 4-element sums and one FMA), the block
// unpacked once for all C rows.
template <class WB, class XB, int C>
void row_pair_tile(int64_t nb, const WB* w0, const WB* w1, const uint8_t* x, size_t xrb, const float* xs,
                   const int32_t* init, float* y, int64_t ldy) {
    __m512 acc[C];
    float summs[C][2];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps(), summs[c][0] = summs[c][1] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(unpack256<WB>(w0[b])),
                                             unpack256<WB>(w1[b]), 1);
        const __m512 wd = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(w0[b].d)), _mm256_set1_ps(_cvtsh_ss(w1[b].d)), 1);
        float wm0 = 0.0f, wm1 = 0.0f;
        if constexpr (kHasMin<WB>) wm0 = _cvtsh_ss(w0[b].m), wm1 = _cvtsh_ss(w1[b].m);
        for (int c = 0; c < C; ++c) {
            const XB& xb = ((const XB*)(x + c * xrb))[b];
            const float* sc = xs + 2 * (c * nb + b);
            const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)xb.qs));
            __m512i s;
            if constexpr (kHasMin<WB>) {
                s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xq);
                summs[c][0] = fmaf(wm0, sc[1], summs[c][0]);
                summs[c][1] = fmaf(wm1, sc[1], summs[c][1]);
            } else {   // sum (q + bias) x - bias sum x = sum (q) x: ggml's integers, exactly
                const __m512i start = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(init + 8 * (c * nb + b))));
                s = _mm512_dpbusd_epi32(start, q, xq);
            }
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(wd, _mm512_set1_ps(sc[0])), _mm512_cvtepi32_ps(s), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) {
        alignas(64) float a[16];
        _mm512_store_ps(a, acc[c]);
        y[c * ldy] = hsum8(a) + summs[c][0];
        y[c * ldy + 1] = hsum8(a + 8) + summs[c][1];
    }
}

// row_pair_tile for c = 1..4 activation rows.
template <class WB, class XB>
void pair_tile(int64_t c, int64_t nb, const WB* w0, const WB* w1, const uint8_t* x, size_t xrb, const float* xs,
               const int32_t* init, float* y, int64_t ldy) {
    switch (c) {
        case 4: return row_pair_tile<WB, XB, 4>(nb, w0, w1, x, xrb, xs, init, y, ldy);
        case 3: return row_pair_tile<WB, XB, 3>(nb, w0, w1, x, xrb, xs, init, y, ldy);
        case 2: return row_pair_tile<WB, XB, 2>(nb, w0, w1, x, xrb, xs, init, y, ldy);
        default: return row_pair_tile<WB, XB, 1>(nb, w0, w1, x, xrb, xs, init, y, ldy);
    }
}

template <class WB, class XB>
void rows_avx512(int64_t K, const uint8_t* W, size_t wrb, int64_t n0, int64_t n1, const uint8_t* X,
                 size_t xrb, const float* xs, const int32_t* init, int64_t M, float* Y, int64_t ldy) {
    constexpr int C = 4;
    const int64_t nb = K / 32;
    for (int64_t m = 0; m < M; m += C) {
        const int64_t c = std::min<int64_t>(C, M - m);
        const float* xsm = xs + 2 * m * nb;
        const int32_t* initm = init + 8 * m * nb;
        int64_t n = n0;
        for (; n + 2 <= n1; n += 2) {
            for (size_t o = 0; o < 2 * wrb; o += 64) __builtin_prefetch(W + n * wrb + o + kPrefetchAhead, 0, 3);
            pair_tile<WB, XB>(c, nb, (const WB*)(W + n * wrb), (const WB*)(W + (n + 1) * wrb), X + m * xrb, xrb,
                              xsm, initm, Y + m * ldy + n, ldy);
        }
        if (n < n1) {   // an odd last row: the pair kernel on the row twice, first half kept
            float two[2 * C];
            const WB* w = (const WB*)(W + n * wrb);
            pair_tile<WB, XB>(c, nb, w, w, X + m * xrb, xrb, xsm, initm, two, 2);
            for (int64_t i = 0; i < c; ++i) Y[(m + i) * ldy + n] = two[2 * i];
        }
    }
}

// Per activation block, once per matmul: the float scales and the lanes' bias start values.
template <class WB, class XB>
void act_prepare(const uint8_t* X, size_t xrb, int64_t M, int64_t nb, float* xs, int32_t* init) {
    act_scales<XB>(X, xrb, M, nb, xs);
    if constexpr (kBias<WB> != 0) act_lane_init<WB, XB>(X, xrb, M, nb, init);
}

template <class WB, class XB> constexpr FastFns fns512() { return {rows_avx512<WB, XB>, act_prepare<WB, XB>}; }
#endif

#if LLL_BUILD_AVX2
// AVX2 (no VNNI): ggml's 8 lanes are one ymm per output. A lane's 4-element integer sum is
// vpmaddubsw (pairs, int16) then vpmaddwd with ones: exact, because no pair reaches int16's
// limit: 4/5-bit weights are at most 31 in magnitude, and Q8_0 weights go through the sign trick
// (|w| times x with w's sign), at most 128 x 127 x 2 since ggml's quantizer never writes -128
// into an activation block.
inline __m256i fifth_bits2(const uint8_t* qh) {   // byte e = 16 when bit e of qh is set
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                              _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(16));
}
// The block's 32 quants as ggml multiplies them: signed for the bias types, unsigned for Q4_1/Q5_1.
template <class WB> inline __m256i quants256(const WB& b) {
    if constexpr (std::is_same_v<WB, block_q8_0>) return _mm256_loadu_si256((const __m256i*)b.qs);
    else if constexpr (std::is_same_v<WB, block_q4_0>) return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8));
    else if constexpr (std::is_same_v<WB, block_q5_0>)
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), fifth_bits2(b.qh)), _mm256_set1_epi8(16));
    else if constexpr (std::is_same_v<WB, block_q5_1>) return _mm256_or_si256(nibbles(b.qs), fifth_bits2(b.qh));
    else return nibbles(b.qs);   // Q4_1
}
// The 8 lanes' 4-element sums of weight quants q (absolute values aq for the signed types) and
// activation quants xq.
template <class WB> inline __m256i lane_sums(__m256i q, __m256i aq, __m256i xq) {
    const __m256i pairs = kHasMin<WB> ? _mm256_maddubs_epi16(q, xq) : _mm256_maddubs_epi16(aq, _mm256_sign_epi8(xq, q));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// Two weight rows against C activation rows, one ymm of ggml's 8 lanes per output.
template <class WB, class XB, int C>
void row_pair_tile2(int64_t nb, const WB* w0, const WB* w1, const uint8_t* x, size_t xrb, const float* xs,
                    float* y, int64_t ldy) {
    __m256 acc[C][2];
    float summs[C][2];
    for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps(), summs[c][0] = summs[c][1] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const __m256i q0 = quants256<WB>(w0[b]), q1 = quants256<WB>(w1[b]);
        const __m256i aq0 = _mm256_abs_epi8(q0), aq1 = _mm256_abs_epi8(q1);
        const float wd0 = _cvtsh_ss(w0[b].d), wd1 = _cvtsh_ss(w1[b].d);
        float wm0 = 0.0f, wm1 = 0.0f;
        if constexpr (kHasMin<WB>) wm0 = _cvtsh_ss(w0[b].m), wm1 = _cvtsh_ss(w1[b].m);
        for (int c = 0; c < C; ++c) {
            const XB& xb = ((const XB*)(x + c * xrb))[b];
            const float* sc = xs + 2 * (c * nb + b);
            const __m256i xq = _mm256_loadu_si256((const __m256i*)xb.qs);
            if constexpr (kHasMin<WB>) {
                summs[c][0] = fmaf(wm0, sc[1], summs[c][0]);
                summs[c][1] = fmaf(wm1, sc[1], summs[c][1]);
            }
            acc[c][0] = _mm256_fmadd_ps(_mm256_set1_ps(wd0 * sc[0]), _mm256_cvtepi32_ps(lane_sums<WB>(q0, aq0, xq)), acc[c][0]);
            acc[c][1] = _mm256_fmadd_ps(_mm256_set1_ps(wd1 * sc[0]), _mm256_cvtepi32_ps(lane_sums<WB>(q1, aq1, xq)), acc[c][1]);
        }
    }
    for (int c = 0; c < C; ++c) {
        alignas(32) float a[16];
        _mm256_store_ps(a, acc[c][0]);
        _mm256_store_ps(a + 8, acc[c][1]);
        y[c * ldy] = hsum8(a) + summs[c][0];
        y[c * ldy + 1] = hsum8(a + 8) + summs[c][1];
    }
}

template <class WB, class XB>
void rows_avx2(int64_t K, const uint8_t* W, size_t wrb, int64_t n0, int64_t n1, const uint8_t* X, size_t xrb,
               const float* xs, const int32_t*, int64_t M, float* Y, int64_t ldy) {
    constexpr int C = 4;
    const int64_t nb = K / 32;
    for (int64_t m = 0; m < M; m += C) {
        const int64_t c = std::min<int64_t>(C, M - m);
        const float* xsm = xs + 2 * m * nb;
        const uint8_t* xm = X + m * xrb;
        for (int64_t n = n0; n < n1; n += 2) {
            for (size_t o = 0; o < 2 * wrb; o += 64) __builtin_prefetch(W + n * wrb + o + kPrefetchAhead, 0, 3);
            const WB* w0 = (const WB*)(W + n * wrb);
            const WB* w1 = n + 1 < n1 ? (const WB*)(W + (n + 1) * wrb) : w0;   // an odd last row: twice
            float two[2 * C];
            float* y = n + 1 < n1 ? Y + m * ldy + n : two;
            const int64_t ly = n + 1 < n1 ? ldy : 2;
            switch (c) {
                case 4: row_pair_tile2<WB, XB, 4>(nb, w0, w1, xm, xrb, xsm, y, ly); break;
                case 3: row_pair_tile2<WB, XB, 3>(nb, w0, w1, xm, xrb, xsm, y, ly); break;
                case 2: row_pair_tile2<WB, XB, 2>(nb, w0, w1, xm, xrb, xsm, y, ly); break;
                default: row_pair_tile2<WB, XB, 1>(nb, w0, w1, xm, xrb, xsm, y, ly); break;
            }
            if (y == two)
                for (int64_t i = 0; i < c; ++i) Y[(m + i) * ldy + n] = two[2 * i];
        }
    }
}

// The float scales alone: these lanes need no bias start.
template <class XB>
void act_scales_only(const uint8_t* X, size_t xrb, int64_t M, int64_t nb, float* xs, int32_t*) {
    act_scales<XB>(X, xrb, M, nb, xs);
}

template <class WB, class XB> constexpr FastFns fns2() { return {rows_avx2<WB, XB>, act_scales_only<XB>}; }
#endif

// The widest level this process may use (LOCALLLM_ISA caps it), or none: the scalar reference.
template <class WB, class XB> FastFns fns() {
#if LLL_BUILD_AVX512
    if (isa_available(Isa::AVX512)) return fns512<WB, XB>();
#endif
#if LLL_BUILD_AVX2
    if (isa_available(Isa::AVX2)) return fns2<WB, XB>();
#endif
    return {nullptr, nullptr};
}

FastFns fast_fn(GGMLType t) {
    switch (t) {
        case GGMLType::Q4_0: return fns<block_q4_0, block_q8_0>();
        case GGMLType::Q4_1: return fns<block_q4_1, block_q8_1>();
        case GGMLType::Q5_0: return fns<block_q5_0, block_q8_0>();
        case GGMLType::Q5_1: return fns<block_q5_1, block_q8_1>();
        case GGMLType::Q8_0: return fns<block_q8_0, block_q8_0>();
        default: return {nullptr, nullptr};
    }
}

}  // namespace

float dot_legacy_ref(GGMLType wtype, int64_t n, const void* w, const void* x) {
    const DotFn f = ref_fn(wtype);
    if (!f) throw std::invalid_argument("llama.cpp-order dot product: not a legacy block type");
    if (n % 32) throw std::invalid_argument("llama.cpp-order dot product: n is not a multiple of 32");
    return f(n, w, x);
}

void matmul_legacy(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K,
                   const void* Xq, int64_t M, float* Y, int64_t ldy, bool use_reference) {
    const DotFn ref = ref_fn(wtype);
    if (!ref) throw std::invalid_argument("matmul_legacy: not a legacy block type");
    const TypeTraits& wt = *type_traits(wtype);
    const TypeTraits& xt = *type_traits(wt.vec_dot_type);
    const size_t wrb = (size_t)(K / 32 * wt.block_bytes), xrb = (size_t)(K / 32 * xt.block_bytes);
    const uint8_t* w = (const uint8_t*)W;
    const uint8_t* x = (const uint8_t*)Xq;
    const FastFns ff = use_reference ? FastFns{nullptr, nullptr} : fast_fn(wtype);
    const RowsFn fast = ff.rows;
    thread_local std::vector<float> xs;
    thread_local std::vector<int32_t> init;
    if (fast) {
        xs.resize((size_t)(2 * M * (K / 32)));
        init.resize((size_t)(8 * M * (K / 32)));
        ff.act(x, xrb, M, K / 32, xs.data(), init.data());
    }
    const float* xsp = xs.data();   // thread_local: the workers must use this thread's copies
    const int32_t* initp = init.data();
    for_row_runs(pool, N, 16, N * K * M, [&](int64_t n0, int64_t n1) {
        if (fast) return fast(K, w, wrb, n0, n1, x, xrb, xsp, initp, M, Y, ldy);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = n0; n < n1; ++n) Y[m * ldy + n] = ref(K, w + n * wrb, x + m * xrb);
    });
}

}  // namespace ggml_order
}  // namespace lll
