// quant_formats.cuh — per weight type, on the device (and on the host: cuda/host_check.cu runs
// the same code on a machine with no GPU): dequantization of 16 consecutive elements
// (exact: the same float operations as csrc/backends/cpu/quants/ref's CPU code, in files built with --fmad=false)
// and the int8 dot product of a 32-element group with a q8_1 activation block (llama.cpp's MMVQ
// scheme: the weight's integers against the activation's int8 values through __dp4a, its scale and
// min applied once per group). Block structs from csrc/common/blocks.h, shared with the CPU.
#pragma once
#include "host_device.cuh"
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/blocks.h"
#include "common/fp16.h"

namespace lll {
namespace cuda {

#define LLC_HD __host__ __device__ __forceinline__

// __dp4a: c + the sum of the products of the four signed bytes of a and b.
LLC_HD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; ++i) c += (int8_t)(a >> (8 * i)) * (int8_t)(b >> (8 * i));
    return c;
#endif
}

// Each byte (0..63) minus 32: Q6_K's offset.
LLC_HD int sub32_bytes(int a) {
#ifdef __CUDA_ARCH__
    return __vsubss4(a, 0x20202020);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= (uint32_t)(uint8_t)((int)((a >> (8 * i)) & 0xff) - 32) << (8 * i);
    return (int)r;
#endif
}

// Four bytes at an address aligned to 2 (most block fields are) or 4.
LLC_HD int load_b2(const uint8_t* p) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}
LLC_HD int load_b4(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }

// Activation side of the int8 dot products: a q8_1 block (d, s = d * sum(qs), 32 int8 values).
struct ActQ8 {
    float d, s;
    const uint8_t* qs;
};
LLC_HD ActQ8 act_q8(const block_q8_1& a) {
    return {fp16_to_f32(a.d), fp16_to_f32(a.s), reinterpret_cast<const uint8_t*>(a.qs)};
}

// Spreads 4 bits (element j -> bit j) to bit 4 of each of 4 bytes: Q5's fifth bits.
LLC_HD int spread_bits4(uint32_t b) {
    return (int)(((b << 4) & 0x10u) | ((b << 11) & 0x1000u) | ((b << 18) & 0x100000u) | ((b << 25) & 0x10000000u));
}

// Q4_K / Q5_K: 6-bit scale and min of sub-block j.
LLC_HD void q4k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Traits: Block, kElems per block; dequant16(block, c, y): elements 16c..16c+15 of the block;
// dot(block, g, act): group g (32 elements) of the block against a q8_1 block.
template <GGMLType T> struct QT;

template <> struct QT<GGMLType::Q4_0> {
    using Block = block_q4_0;
    static constexpr int kElems = 32;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < 16; ++j) y[j] = ((c ? b.qs[j] >> 4 : b.qs[j] & 0x0f) - 8) * d;
    }
    LLC_HD static float dot(const Block& b, int, const ActQ8& a) {
        int sumi = 0;
        for (int i = 0; i < 4; ++i) {
            const int v = load_b2(b.qs + 4 * i);
            sumi = dp4a(v & 0x0f0f0f0f, load_b4(a.qs + 4 * i), sumi);
            sumi = dp4a((v >> 4) & 0x0f0f0f0f, load_b4(a.qs + 16 + 4 * i), sumi);
        }
        return fp16_to_f32(b.d) * (a.d * sumi - 8.0f * a.s);
    }
};

template <> struct QT<GGMLType::Q4_1> {
    using Block = block_q4_1;
    static constexpr int kElems = 32;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const float d = fp16_to_f32(b.d), m = fp16_to_f32(b.m);
        for (int j = 0; j < 16; ++j) y[j] = (c ? b.qs[j] >> 4 : b.qs[j] & 0x0f) * d + m;
    }
    LLC_HD static float dot(const Block& b, int, const ActQ8& a) {
        int sumi = 0;
        for (int i = 0; i < 4; ++i) {
            const int v = load_b4(b.qs + 4 * i);
            sumi = dp4a(v & 0x0f0f0f0f, load_b4(a.qs + 4 * i), sumi);
            sumi = dp4a((v >> 4) & 0x0f0f0f0f, load_b4(a.qs + 16 + 4 * i), sumi);
        }
        return fp16_to_f32(b.d) * a.d * sumi + fp16_to_f32(b.m) * a.s;
    }
};

// Q5_0 / Q5_1: the fifth bit of element j is bit j of qh.
LLC_HD uint32_t q5_high(const uint8_t* qh) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

// Sum over the group of the 5-bit quants times the activation's int8 values.
LLC_HD int q5_dot(const uint8_t* qs, uint32_t qh, const ActQ8& a) {
    int sumi = 0;
    for (int i = 0; i < 4; ++i) {
        const int v = load_b2(qs + 4 * i);
        const int lo = (v & 0x0f0f0f0f) | spread_bits4(qh >> (4 * i));
        const int hi = ((v >> 4) & 0x0f0f0f0f) | spread_bits4(qh >> (16 + 4 * i));
        sumi = dp4a(lo, load_b4(a.qs + 4 * i), sumi);
        sumi = dp4a(hi, load_b4(a.qs + 16 + 4 * i), sumi);
    }
    return sumi;
}

template <> struct QT<GGMLType::Q5_0> {
    using Block = block_q5_0;
    static constexpr int kElems = 32;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const float d = fp16_to_f32(b.d);
        const uint32_t qh = q5_high(b.qh);
        for (int j = 0; j < 16; ++j) {
            const int q = (c ? b.qs[j] >> 4 : b.qs[j] & 0x0f) | (((qh >> (j + 16 * c)) & 1) << 4);
            y[j] = (q - 16) * d;
        }
    }
    LLC_HD static float dot(const Block& b, int, const ActQ8& a) {
        return fp16_to_f32(b.d) * (a.d * q5_dot(b.qs, q5_high(b.qh), a) - 16.0f * a.s);
    }
};

template <> struct QT<GGMLType::Q5_1> {
    using Block = block_q5_1;
    static constexpr int kElems = 32;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const float d = fp16_to_f32(b.d), m = fp16_to_f32(b.m);
        const uint32_t qh = q5_high(b.qh);
        for (int j = 0; j < 16; ++j) {
            const int q = (c ? b.qs[j] >> 4 : b.qs[j] & 0x0f) | (((qh >> (j + 16 * c)) & 1) << 4);
            y[j] = q * d + m;
        }
    }
    LLC_HD static float dot(const Block& b, int, const ActQ8& a) {
        return fp16_to_f32(b.d) * a.d * q5_dot(b.qs, q5_high(b.qh), a) + fp16_to_f32(b.m) * a.s;
    }
};

template <> struct QT<GGMLType::Q8_0> {
    using Block = block_q8_0;
    static constexpr int kElems = 32;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < 16; ++j) y[j] = b.qs[16 * c + j] * d;
    }
    LLC_HD static float dot(const Block& b, int, const ActQ8& a) {
        const uint8_t* q = reinterpret_cast<const uint8_t*>(b.qs);
        int sumi = 0;
        for (int i = 0; i < 8; ++i) sumi = dp4a(load_b2(q + 4 * i), load_b4(a.qs + 4 * i), sumi);
        return fp16_to_f32(b.d) * a.d * sumi;
    }
};

// The fifth bit of element l of sub-block `sub` (0..7): none in Q4_K, bit `sub` of qh[l] in Q5_K.
LLC_HD int k_high_bit(const block_q4_K&, int, int) { return 0; }
LLC_HD int k_high_bit(const block_q5_K& b, int sub, int l) { return ((b.qh[l] >> sub) & 1) << 4; }
LLC_HD int k_high_bits4(const block_q4_K&, int, int) { return 0; }
LLC_HD int k_high_bits4(const block_q5_K& b, int sub, int i) {
    return ((load_b4(b.qh + 4 * i) >> sub) & 0x01010101) << 4;
}

// Q4_K and Q5_K: 8 sub-blocks of 32, x = d*sc * q - dmin*m.
template <class B> struct QTK45 {
    using Block = B;
    static constexpr int kElems = QK_K;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const int sub = c / 2, l0 = 16 * (c % 2);
        int sc, m;
        q4k_scale_min(sub, b.scales, sc, m);
        const float d = fp16_to_f32(b.d) * sc, mn = fp16_to_f32(b.dmin) * m;
        const uint8_t* q = b.qs + 32 * (sub / 2);
        const int shift = (sub % 2) * 4;
        for (int j = 0; j < 16; ++j) {
            const int l = l0 + j;
            y[j] = d * (((q[l] >> shift) & 0x0f) | k_high_bit(b, sub, l)) - mn;
        }
    }
    LLC_HD static float dot(const Block& b, int sub, const ActQ8& a) {
        int sc, m;
        q4k_scale_min(sub, b.scales, sc, m);
        const uint8_t* q = b.qs + 32 * (sub / 2);
        const int shift = (sub % 2) * 4;
        int sumi = 0;
        for (int i = 0; i < 8; ++i) {
            const int v = ((load_b4(q + 4 * i) >> shift) & 0x0f0f0f0f) | k_high_bits4(b, sub, i);
            sumi = dp4a(v, load_b4(a.qs + 4 * i), sumi);
        }
        return fp16_to_f32(b.d) * sc * a.d * sumi - fp16_to_f32(b.dmin) * m * a.s;
    }
};
template <> struct QT<GGMLType::Q4_K> : QTK45<block_q4_K> {};
template <> struct QT<GGMLType::Q5_K> : QTK45<block_q5_K> {};

// Q6_K: 32-element group g = (128-element half g/4, quarter g%4); 16 sub-blocks of 16 with int8
// scales; q = (4 low bits | 2 high bits << 4) - 32.
template <> struct QT<GGMLType::Q6_K> {
    using Block = block_q6_K;
    static constexpr int kElems = QK_K;
    LLC_HD static void dequant16(const Block& b, int c, float* y) {
        const int grp = c / 2, l0 = 16 * (c % 2);
        const int half = grp / 4, quarter = grp % 4;
        const uint8_t* ql = b.ql + 64 * half + 32 * (quarter % 2);
        const uint8_t* qh = b.qh + 32 * half;
        const int8_t* sc = b.scales + 8 * half;
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < 16; ++j) {
            const int l = l0 + j;
            const int low = quarter < 2 ? (ql[l] & 0x0f) : (ql[l] >> 4);
            const int q = (low | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
            y[j] = d * sc[l / 16 + 2 * quarter] * q;
        }
    }
    LLC_HD static float dot(const Block& b, int grp, const ActQ8& a) {
        const int half = grp / 4, quarter = grp % 4;
        const uint8_t* ql = b.ql + 64 * half + 32 * (quarter % 2);
        const uint8_t* qh = b.qh + 32 * half;
        const int8_t* sc = b.scales + 8 * half + 2 * quarter;
        const int shift_l = quarter < 2 ? 0 : 4, shift_h = 2 * quarter;
        int sumi[2] = {0, 0};
        for (int i = 0; i < 8; ++i) {
            const int low = (load_b2(ql + 4 * i) >> shift_l) & 0x0f0f0f0f;
            const int high = ((load_b2(qh + 4 * i) >> shift_h) & 0x03030303) << 4;
            const int q = sub32_bytes(low | high);
            sumi[i / 4] = dp4a(q, load_b4(a.qs + 4 * i), sumi[i / 4]);
        }
        return fp16_to_f32(b.d) * a.d * (sc[0] * sumi[0] + sc[1] * sumi[1]);
    }
};

// Plain types: element i of a row.
template <GGMLType T> LLC_HD float load_plain(const uint8_t* row, int64_t i);
template <> LLC_HD float load_plain<GGMLType::F32>(const uint8_t* row, int64_t i) {
    return reinterpret_cast<const float*>(row)[i];
}
template <> LLC_HD float load_plain<GGMLType::F16>(const uint8_t* row, int64_t i) {
    return fp16_to_f32(reinterpret_cast<const fp16_t*>(row)[i]);
}
template <> LLC_HD float load_plain<GGMLType::BF16>(const uint8_t* row, int64_t i) {
    return bf16_to_f32(reinterpret_cast<const bf16_t*>(row)[i]);
}

template <GGMLType T>
inline constexpr bool kPlain = T == GGMLType::F32 || T == GGMLType::F16 || T == GGMLType::BF16;

// Elements 16c..16c+15 of a row of type T (the row starts at a block boundary).
template <GGMLType T> LLC_HD void dequant16_row(const uint8_t* row, int64_t c, float* y) {
    if constexpr (kPlain<T>) {
        for (int j = 0; j < 16; ++j) y[j] = load_plain<T>(row, 16 * c + j);
    } else {
        using Q = QT<T>;
        constexpr int per_block = Q::kElems / 16;
        const auto* blocks = reinterpret_cast<const typename Q::Block*>(row);
        Q::dequant16(blocks[c / per_block], (int)(c % per_block), y);
    }
}

// Calls f.template operator()<T>() with T the weight type `type`; false when unsupported.
template <class F> bool dispatch_type(uint32_t type, F&& f) {
    switch (static_cast<GGMLType>(type)) {
        case GGMLType::F32: f.template operator()<GGMLType::F32>(); return true;
        case GGMLType::F16: f.template operator()<GGMLType::F16>(); return true;
        case GGMLType::BF16: f.template operator()<GGMLType::BF16>(); return true;
        case GGMLType::Q4_0: f.template operator()<GGMLType::Q4_0>(); return true;
        case GGMLType::Q4_1: f.template operator()<GGMLType::Q4_1>(); return true;
        case GGMLType::Q5_0: f.template operator()<GGMLType::Q5_0>(); return true;
        case GGMLType::Q5_1: f.template operator()<GGMLType::Q5_1>(); return true;
        case GGMLType::Q8_0: f.template operator()<GGMLType::Q8_0>(); return true;
        case GGMLType::Q4_K: f.template operator()<GGMLType::Q4_K>(); return true;
        case GGMLType::Q5_K: f.template operator()<GGMLType::Q5_K>(); return true;
        case GGMLType::Q6_K: f.template operator()<GGMLType::Q6_K>(); return true;
        default: return false;
    }
}

}  // namespace cuda
}  // namespace lll
