// dot_scalar.cpp — scalar reference dot products (weight row . activation row) for every weight
// type, plus the level-by-level kernel lookup through the type registry (find_kernels, vec_dot_fn).
//
// Integer parts are exact; the float part follows ggml's generic code: per block (or super-block)
// f32 scale products times the integer sum, accumulated in f32. Plain float types accumulate in
// double, as ggml's generic f16 dot does. SIMD levels are tested against these functions.
#include <string.h>

#include "common/fp16.h"
#include "backends/cpu/quants/dot/dot_impl.h"
#include "backends/cpu/quants/dot/iq_lowbit.h"

namespace lll {
namespace kern {

// Named, not anonymous: GCC gives templates instantiated on alias templates from an anonymous
// namespace external (weak) linkage, so equally named tiles of two files would be merged.
namespace scalar_impl {

inline float h2f(fp16_t h) { return fp16_to_f32(h); }

// ---- legacy 32-element blocks ---------------------------------------------------------------

float dot_q4_0(int64_t n, const void* vw, const void* vx) {
    const block_q4_0* w = (const block_q4_0*)vw;
    const block_q8_0* x = (const block_q8_0*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += ((w[i].qs[j] & 0x0F) - 8) * x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
        }
        sumf += (float)sumi * (h2f(w[i].d) * h2f(x[i].d));
    }
    return sumf;
}

float dot_q4_1(int64_t n, const void* vw, const void* vx) {
    const block_q4_1* w = (const block_q4_1*)vw;
    const block_q8_1* x = (const block_q8_1*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += (w[i].qs[j] & 0x0F) * x[i].qs[j];
            sumi += (w[i].qs[j] >> 4) * x[i].qs[j + 16];
        }
        sumf += (h2f(w[i].d) * h2f(x[i].d)) * (float)sumi + h2f(w[i].m) * h2f(x[i].s);
    }
    return sumf;
}

// 5th bit of element j (0..31) of a Q5 block, as 0 or 16.
inline int q5_high(uint32_t qh, int j) { return (int)((qh >> j) & 1) << 4; }

float dot_q5_0(int64_t n, const void* vw, const void* vx) {
    const block_q5_0* w = (const block_q5_0*)vw;
    const block_q8_0* x = (const block_q8_0*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += (((w[i].qs[j] & 0x0F) | q5_high(qh, j)) - 16) * x[i].qs[j];
            sumi += (((w[i].qs[j] >> 4) | q5_high(qh, j + 16)) - 16) * x[i].qs[j + 16];
        }
        sumf += (float)sumi * (h2f(w[i].d) * h2f(x[i].d));
    }
    return sumf;
}

float dot_q5_1(int64_t n, const void* vw, const void* vx) {
    const block_q5_1* w = (const block_q5_1*)vw;
    const block_q8_1* x = (const block_q8_1*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += ((w[i].qs[j] & 0x0F) | q5_high(qh, j)) * x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) | q5_high(qh, j + 16)) * x[i].qs[j + 16];
        }
        sumf += (h2f(w[i].d) * h2f(x[i].d)) * (float)sumi + h2f(w[i].m) * h2f(x[i].s);
    }
    return sumf;
}

float dot_q8_0(int64_t n, const void* vw, const void* vx) {
    const block_q8_0* w = (const block_q8_0*)vw;
    const block_q8_0* x = (const block_q8_0*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        int sumi = 0;
        for (int j = 0; j < 32; ++j) sumi += w[i].qs[j] * x[i].qs[j];
        sumf += (float)sumi * (h2f(w[i].d) * h2f(x[i].d));
    }
    return sumf;
}

// ---- K-quants: 256-element super-blocks, activations in Q8_K --------------------------------

// sum over one 16-element group of q[l] * y[l].
inline int dot16(const int8_t* q, const int8_t* y) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += q[l] * y[l];
    return s;
}

float dot_q2_K(int64_t n, const void* vw, const void* vx) {
    const block_q2_K* w = (const block_q2_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        // q[e]: 2-bit quant of element e; element 128h + 32s + l sits in qs[32h + l] >> 2s.
        int8_t q[QK_K];
        for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 4; ++s)
                for (int l = 0; l < 32; ++l) q[128 * h + 32 * s + l] = (w[i].qs[32 * h + l] >> (2 * s)) & 3;
        int isum = 0, summs = 0;
        for (int g = 0; g < 16; ++g) {
            isum += (w[i].scales[g] & 0x0F) * dot16(q + 16 * g, x[i].qs + 16 * g);
            summs += (w[i].scales[g] >> 4) * x[i].bsums[g];
        }
        const float dall = x[i].d * h2f(w[i].d);
        const float dmin = x[i].d * h2f(w[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

float dot_q3_K(int64_t n, const void* vw, const void* vx) {
    const block_q3_K* w = (const block_q3_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        // element 128h + 32s + l: 2 low bits in qs[32h + l] >> 2s, high bit (4h + s) of hmask[l];
        // value = low - 4 when the high bit is clear.
        int8_t q[QK_K];
        for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 4; ++s)
                for (int l = 0; l < 32; ++l) {
                    const int low = (w[i].qs[32 * h + l] >> (2 * s)) & 3;
                    const int high = (w[i].hmask[l] >> (4 * h + s)) & 1;
                    q[128 * h + 32 * s + l] = (int8_t)(low - (high ? 0 : 4));
                }
        int sc[16];
        q3_K_scales_unpacked(w[i].scales, sc);
        int isum = 0;
        for (int g = 0; g < 16; ++g) isum += sc[g] * dot16(q + 16 * g, x[i].qs + 16 * g);
        sumf += (h2f(w[i].d) * x[i].d) * (float)isum;
    }
    return sumf;
}

// Q4_K / Q5_K share everything but the 5th bit: qh == nullptr for Q4_K.
float dot_q45_K(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, fp16_t d, fp16_t dmin,
                const block_q8_K& x) {
    // element 64j + l (l < 32): low nibble of qs[32j + l]; 64j + 32 + l: its high nibble.
    // 5th bits: bit 2j (resp. 2j + 1) of qh[l].
    int8_t q[QK_K];
    for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
            int lo = qs[32 * j + l] & 0x0F, hi = qs[32 * j + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
            }
            q[64 * j + l] = (int8_t)lo;
            q[64 * j + 32 + l] = (int8_t)hi;
        }
    int isum = 0, summ = 0;
    for (int sb = 0; sb < 8; ++sb) {
        int sc, m;
        k4_scale_min(scales, sb, &sc, &m);
        isum += sc * (dot16(q + 32 * sb, x.qs + 32 * sb) + dot16(q + 32 * sb + 16, x.qs + 32 * sb + 16));
        summ += m * (x.bsums[2 * sb] + x.bsums[2 * sb + 1]);
    }
    return (h2f(d) * x.d) * (float)isum - (h2f(dmin) * x.d) * (float)summ;
}

float dot_q4_K(int64_t n, const void* vw, const void* vx) {
    const block_q4_K* w = (const block_q4_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i)
        sumf += dot_q45_K(w[i].scales, w[i].qs, nullptr, w[i].d, w[i].dmin, x[i]);
    return sumf;
}

float dot_q5_K(int64_t n, const void* vw, const void* vx) {
    const block_q5_K* w = (const block_q5_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i)
        sumf += dot_q45_K(w[i].scales, w[i].qs, w[i].qh, w[i].d, w[i].dmin, x[i]);
    return sumf;
}

float dot_q6_K(int64_t n, const void* vw, const void* vx) {
    const block_q6_K* w = (const block_q6_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        // element 128h + 32s + l: 4 low bits from ql[64h + l + 32(s&1)] (nibble s>>1),
        // 2 high bits from qh[32h + l] >> 2s; value = q - 32.
        int8_t q[QK_K];
        for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 4; ++s)
                for (int l = 0; l < 32; ++l) {
                    const int low = (w[i].ql[64 * h + l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0x0F;
                    const int high = (w[i].qh[32 * h + l] >> (2 * s)) & 3;
                    q[128 * h + 32 * s + l] = (int8_t)((low | (high << 4)) - 32);
                }
        int isum = 0;
        for (int g = 0; g < 16; ++g) isum += w[i].scales[g] * dot16(q + 16 * g, x[i].qs + 16 * g);
        sumf += (h2f(w[i].d) * x[i].d) * (float)isum;
    }
    return sumf;
}

// ---- 4-bit non-linear grid (kvalues_iq4nl) ----------------------------------------------------

// sum over one 32-element block of grid[nibble] * y: low nibbles of qs[j] are elements j,
// high nibbles elements 16 + j.
inline int dot_iq4_block(const uint8_t* qs, const int8_t* y) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
        s += kvalues_iq4nl[qs[j] & 0x0F] * y[j];
        s += kvalues_iq4nl[qs[j] >> 4] * y[j + 16];
    }
    return s;
}

float dot_iq4_nl(int64_t n, const void* vw, const void* vx) {
    const block_iq4_nl* w = (const block_iq4_nl*)vw;
    const block_q8_0* x = (const block_q8_0*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; ++i)
        sumf += (float)dot_iq4_block(w[i].qs, x[i].qs) * (h2f(w[i].d) * h2f(x[i].d));
    return sumf;
}

float dot_iq4_xs(int64_t n, const void* vw, const void* vx) {
    const block_iq4_xs* w = (const block_iq4_xs*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0;   // exact: |isum| <= 8 * 32 * 32 * 127 * 127
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int ls = ((w[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0x0F) | (((w[i].scales_h >> 2 * ib) & 3) << 4);
            isum += (ls - 32) * dot_iq4_block(w[i].qs + 16 * ib, x[i].qs + 32 * ib);
        }
        sumf += (h2f(w[i].d) * x[i].d) * (float)isum;
    }
    return sumf;
}

// Low-bit i-quants (iq_lowbit.h): the exact integer sum of each super-block's groups of 32.
template <class Type>
float dot_iq_lowbit(int64_t n, const void* vw, const void* vx) {
    const typename Type::Block* w = (const typename Type::Block*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            iqlow::Group32 g;
            Type::group(w[i], ib, g);
            const uint8_t* grid = (const uint8_t*)g.grid;
            const int8_t* q8 = x[i].qs + 32 * ib;
            for (int h = 0; h < 2; ++h) {
                int sumi = 0;
                for (int j = 16 * h; j < 16 * h + 16; ++j)
                    sumi += grid[j] * q8[j] * ((g.signs >> j) & 1 ? -1 : 1);
                isum += g.mult[h] * sumi;
            }
        }
        sumf = iqlow::add_scaled(sumf, h2f(w[i].d), x[i].d, isum);
    }
    return Type::kFinal * sumf;
}

// ---- plain float types (activations in the same type) ---------------------------------------

float dot_f32(int64_t n, const void* vw, const void* vx) {
    const float* w = (const float*)vw;
    const float* x = (const float*)vx;
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += (double)w[i] * (double)x[i];
    return (float)s;
}

float dot_f16(int64_t n, const void* vw, const void* vx) {
    const fp16_t* w = (const fp16_t*)vw;
    const fp16_t* x = (const fp16_t*)vx;
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += (double)(h2f(w[i]) * h2f(x[i]));
    return (float)s;
}

float dot_bf16(int64_t n, const void* vw, const void* vx) {
    const bf16_t* w = (const bf16_t*)vw;
    const bf16_t* x = (const bf16_t*)vx;
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += (double)(bf16_to_f32(w[i]) * bf16_to_f32(x[i]));
    return (float)s;
}

template <VecDotFn F>
KernelSet make_scalar_set() {
    KernelSet ks{};
    ks.isa = Isa::Scalar;
    ks.vec_dot = F;
    TileTable<DotTile<F>::template T, 1, 1>::fill(ks);
    return ks;
}

}  // namespace scalar_impl
using namespace scalar_impl;

LLL_DEFINE_KERNEL_SET(scalar_q4_0, make_scalar_set<dot_q4_0>())
LLL_DEFINE_KERNEL_SET(scalar_q4_1, make_scalar_set<dot_q4_1>())
LLL_DEFINE_KERNEL_SET(scalar_q5_0, make_scalar_set<dot_q5_0>())
LLL_DEFINE_KERNEL_SET(scalar_q5_1, make_scalar_set<dot_q5_1>())
LLL_DEFINE_KERNEL_SET(scalar_q8_0, make_scalar_set<dot_q8_0>())
LLL_DEFINE_KERNEL_SET(scalar_q2_K, make_scalar_set<dot_q2_K>())
LLL_DEFINE_KERNEL_SET(scalar_q3_K, make_scalar_set<dot_q3_K>())
LLL_DEFINE_KERNEL_SET(scalar_q4_K, make_scalar_set<dot_q4_K>())
LLL_DEFINE_KERNEL_SET(scalar_q5_K, make_scalar_set<dot_q5_K>())
LLL_DEFINE_KERNEL_SET(scalar_q6_K, make_scalar_set<dot_q6_K>())
LLL_DEFINE_KERNEL_SET(scalar_f32, make_scalar_set<dot_f32>())
LLL_DEFINE_KERNEL_SET(scalar_f16, make_scalar_set<dot_f16>())
LLL_DEFINE_KERNEL_SET(scalar_bf16, make_scalar_set<dot_bf16>())
LLL_DEFINE_KERNEL_SET(scalar_iq4_nl, make_scalar_set<dot_iq4_nl>())
LLL_DEFINE_KERNEL_SET(scalar_iq4_xs, make_scalar_set<dot_iq4_xs>())
LLL_DEFINE_KERNEL_SET(scalar_iq2_xxs, make_scalar_set<dot_iq_lowbit<iqlow::IQ2XXS>>())
LLL_DEFINE_KERNEL_SET(scalar_iq2_xs, make_scalar_set<dot_iq_lowbit<iqlow::IQ2XS>>())
LLL_DEFINE_KERNEL_SET(scalar_iq2_s, make_scalar_set<dot_iq_lowbit<iqlow::IQ2S>>())
LLL_DEFINE_KERNEL_SET(scalar_iq3_xxs, make_scalar_set<dot_iq_lowbit<iqlow::IQ3XXS>>())
LLL_DEFINE_KERNEL_SET(scalar_iq3_s, make_scalar_set<dot_iq_lowbit<iqlow::IQ3S>>())

const KernelSet* find_kernels(GGMLType wtype, Isa isa) {
    const TypeTraits* tt = type_traits(wtype);
    if (!tt || !isa_available(isa)) return nullptr;
    for (int level = (int)isa; level >= 0; --level)
        if (tt->kernels[level]) return tt->kernels[level]();
    return nullptr;
}

}  // namespace kern

VecDotFn vec_dot_fn(GGMLType wtype, Isa isa) {
    const kern::KernelSet* ks = kern::find_kernels(wtype, isa);
    return ks ? ks->vec_dot : nullptr;
}

}  // namespace lll
