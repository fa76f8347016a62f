// fp16.h — exact IEEE half and bfloat16 conversions (round-to-nearest-even), host and device.
#pragma once
#include <stdint.h>
#include <string.h>
#include "common/blocks.h"

namespace lll {

LLL_HD inline float bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
LLL_HD inline uint32_t f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// binary16 -> binary32, exact for every input (subnormals, inf, NaN included).
LLL_HD inline float fp16_to_f32(fp16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf / NaN
    if (exp == 0) {
        if (mant == 0) return bits_to_f32(sign);                              // +-0
        // subnormal: value = mant * 2^-24
        float v = (float)mant * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

// binary32 -> binary16 with round-to-nearest-even (what numpy's astype(float16) does).
LLL_HD inline fp16_t f32_to_fp16(float f) {
    const uint32_t x = f32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {                       // inf or NaN
        return (fp16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    }
    if (ax >= 0x477ff000u) return (fp16_t)(sign | 0x7c00);   // rounds to >= 65520: overflow
    if (ax < 0x38800000u) {                        // result is subnormal or zero
        if (ax < 0x33000000u) return (fp16_t)sign; // < half of the smallest subnormal
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffff) | 0x800000;
        const uint32_t shift = 126 - e;            // 14 + (112 - (e - 127)) - 1 ... bits to drop
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (fp16_t)(sign | q);
    }
    // normal: rebias exponent, round the 13 dropped mantissa bits to nearest even
    uint32_t r = ax - 0x38000000u;                 // exponent 127 -> 15
    r += 0xfff + ((r >> 13) & 1);
    return (fp16_t)(sign | (r >> 13));
}

LLL_HD inline float bf16_to_f32(bf16_t h) { return bits_to_f32((uint32_t)h << 16); }

// binary32 -> bfloat16 as ggml does it: NaN kept quiet, otherwise round-to-nearest-even.
LLL_HD inline bf16_t f32_to_bf16(float f) {
    const uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 64);  // quiet NaN
    return (bf16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace lll
