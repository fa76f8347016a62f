// ref_legacy.cpp — reference conversions for the plain types (F32, F16, BF16, I8..I64, F64) and
// the legacy 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
//
// Bit-exact with ggml's dequantize_row_* / quantize_row_*_ref: the same float operations in the
// same order. FMA contraction is switched off for this file because ggml's reference (ggml-base,
// built without -march flags) never fuses `q*d + m`, and gguf-py's numpy does not either.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include <algorithm>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/quants/ref/ref_rows.h"

namespace lll {
namespace ref {

// ---------------------------------------------------------------- plain types

void dequantize_f32(const void* src, float* dst, int64_t k) {
    memcpy(dst, src, (size_t)k * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t k) {
    const fp16_t* x = static_cast<const fp16_t*>(src);
    for (int64_t i = 0; i < k; ++i) dst[i] = fp16_to_f32(x[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t k) {
    const bf16_t* x = static_cast<const bf16_t*>(src);
    for (int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(x[i]);
}

// Integer and f64 tensors are plain arrays; "dequantizing" them is a value conversion to f32
// (round-to-nearest-even for values f32 cannot hold exactly, like numpy's astype).
template <typename T>
static void convert_to_f32(const void* src, float* dst, int64_t k) {
    const T* x = static_cast<const T*>(src);
    for (int64_t i = 0; i < k; ++i) dst[i] = (float)x[i];
}

void dequantize_f64(const void* src, float* dst, int64_t k) { convert_to_f32<double>(src, dst, k); }
void dequantize_i8(const void* src, float* dst, int64_t k) { convert_to_f32<int8_t>(src, dst, k); }
void dequantize_i16(const void* src, float* dst, int64_t k) { convert_to_f32<int16_t>(src, dst, k); }
void dequantize_i32(const void* src, float* dst, int64_t k) { convert_to_f32<int32_t>(src, dst, k); }
void dequantize_i64(const void* src, float* dst, int64_t k) { convert_to_f32<int64_t>(src, dst, k); }

void quantize_f32(const float* src, void* dst, int64_t k) {
    memcpy(dst, src, (size_t)k * sizeof(float));
}

void quantize_f16(const float* src, void* dst, int64_t k) {
    fp16_t* y = static_cast<fp16_t*>(dst);
    for (int64_t i = 0; i < k; ++i) y[i] = f32_to_fp16(src[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t k) {
    bf16_t* y = static_cast<bf16_t*>(dst);
    for (int64_t i = 0; i < k; ++i) y[i] = f32_to_bf16(src[i]);
}

// ---------------------------------------------------------------- block helpers

// The element of largest magnitude (first one on ties), 0 when the block is all zeros — the
// signed value, because Q4_0/Q5_0 map it to the most negative quant.
static float signed_absmax(const float* x, int n) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

// Largest |x| with ggml's MAX(amax, fabsf(v)) = (amax > |v| ? amax : |v|), NaN behaviour included.
static float absmax(const float* x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; ++j) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    return amax;
}

static void min_max(const float* x, int n, float* min_out, float* max_out) {
    float min = FLT_MAX;
    float max = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

// ggml writes `MIN(15, (int8_t)(v))` into a uint8_t: truncate, wrap to int8, clamp from above,
// then wrap to uint8 (a negative value would wrap to >= 128; finite inputs never get there).
static uint8_t quant_min_i8(float v, int hi) {
    const int q = std::min(hi, (int)(int8_t)trunc_to_i32(v));
    return (uint8_t)q;
}

// ---------------------------------------------------------------- Q4_0: x = d * (q - 8)

void dequantize_q4_0(const void* src, float* dst, int64_t k) {
    const block_q4_0* x = static_cast<const block_q4_0*>(src);
    const int64_t nb = k / QK4_0;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        float* y = dst + i * QK4_0;
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + QK4_0 / 2] = (float)x1 * d;
        }
    }
}

void quantize_q4_0(const float* src, void* dst, int64_t k) {
    block_q4_0* y = static_cast<block_q4_0*>(dst);
    const int64_t nb = k / QK4_0;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK4_0;
        const float d = signed_absmax(x, QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const uint8_t q0 = quant_min_i8(x[j] * id + 8.5f, 15);
            const uint8_t q1 = quant_min_i8(x[j + QK4_0 / 2] * id + 8.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

// ---------------------------------------------------------------- Q4_1: x = d * q + m

void dequantize_q4_1(const void* src, float* dst, int64_t k) {
    const block_q4_1* x = static_cast<const block_q4_1*>(src);
    const int64_t nb = k / QK4_1;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const float m = fp16_to_f32(x[i].m);
        float* y = dst + i * QK4_1;
        for (int j = 0; j < QK4_1 / 2; ++j) {
            y[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void quantize_q4_1(const float* src, void* dst, int64_t k) {
    block_q4_1* y = static_cast<block_q4_1*>(dst);
    const int64_t nb = k / QK4_1;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK4_1;
        float min, max;
        min_max(x, QK4_1, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const uint8_t q0 = quant_min_i8((x[j] - min) * id + 0.5f, 15);
            const uint8_t q1 = quant_min_i8((x[j + QK4_1 / 2] - min) * id + 0.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

// ---------------------------------------------------------------- Q5_0: x = d * (q - 16)

// Bit j of qh is the 5th bit of element j.
static int fifth_bit(uint32_t qh, int j) { return (int)((qh >> j) & 1u) << 4; }

static void pack_5bit(const uint8_t* q, uint8_t* qs, uint8_t* qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        qh |= ((q[j] & 0x10u) >> 4) << j;
        qh |= ((q[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, sizeof(qh));
}

void dequantize_q5_0(const void* src, float* dst, int64_t k) {
    const block_q5_0* x = static_cast<const block_q5_0*>(src);
    const int64_t nb = k / QK5_0;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        float* y = dst + i * QK5_0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int x0 = ((x[i].qs[j] & 0x0F) | fifth_bit(qh, j)) - 16;
            const int x1 = ((x[i].qs[j] >> 4) | fifth_bit(qh, j + 16)) - 16;
            y[j] = (float)x0 * d;
            y[j + QK5_0 / 2] = (float)x1 * d;
        }
    }
}

void quantize_q5_0(const float* src, void* dst, int64_t k) {
    block_q5_0* y = static_cast<block_q5_0*>(dst);
    const int64_t nb = k / QK5_0;
    uint8_t q[QK5_0];
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK5_0;
        const float d = signed_absmax(x, QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK5_0; ++j) q[j] = quant_min_i8(x[j] * id + 16.5f, 31);
        pack_5bit(q, y[i].qs, y[i].qh);
    }
}

// ---------------------------------------------------------------- Q5_1: x = d * q + m

void dequantize_q5_1(const void* src, float* dst, int64_t k) {
    const block_q5_1* x = static_cast<const block_q5_1*>(src);
    const int64_t nb = k / QK5_1;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const float m = fp16_to_f32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof(qh));
        float* y = dst + i * QK5_1;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) | fifth_bit(qh, j);
            const int x1 = (x[i].qs[j] >> 4) | fifth_bit(qh, j + 16);
            y[j] = (float)x0 * d + m;
            y[j + QK5_1 / 2] = (float)x1 * d + m;
        }
    }
}

void quantize_q5_1(const float* src, void* dst, int64_t k) {
    block_q5_1* y = static_cast<block_q5_1*>(dst);
    const int64_t nb = k / QK5_1;
    uint8_t q[QK5_1];
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK5_1;
        float min, max;
        min_max(x, QK5_1, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        // ggml: (uint8_t)(x0 + 0.5f) with no clamp; in range for every finite block.
        for (int j = 0; j < QK5_1; ++j) q[j] = (uint8_t)trunc_to_i32((x[j] - min) * id + 0.5f);
        pack_5bit(q, y[i].qs, y[i].qh);
    }
}

// ---------------------------------------------------------------- Q8_0 / Q8_1: x = d * q

void dequantize_q8_0(const void* src, float* dst, int64_t k) {
    const block_q8_0* x = static_cast<const block_q8_0*>(src);
    const int64_t nb = k / QK8_0;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; ++j) dst[i * QK8_0 + j] = (float)x[i].qs[j] * d;
    }
}

// ggml has no dequantize_row_q8_1 (Q8_1 is an activation format); its meaning is d * q, the
// stored sum s = d * sum(q) is redundant.
void dequantize_q8_1(const void* src, float* dst, int64_t k) {
    const block_q8_1* x = static_cast<const block_q8_1*>(src);
    const int64_t nb = k / QK8_1;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; ++j) dst[i * QK8_1 + j] = (float)x[i].qs[j] * d;
    }
}

// roundf (half away from zero) stored into int8, as ggml's `y[i].qs[j] = roundf(x0)`.
static int8_t round_to_i8(float v) { return (int8_t)trunc_to_i32(roundf(v)); }

void quantize_q8_0(const float* src, void* dst, int64_t k) {
    block_q8_0* y = static_cast<block_q8_0*>(dst);
    const int64_t nb = k / QK8_0;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK8_0;
        const float d = absmax(x, QK8_0) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = round_to_i8(x[j] * id);
    }
}

void quantize_q8_1(const float* src, void* dst, int64_t k) {
    block_q8_1* y = static_cast<block_q8_1*>(dst);
    const int64_t nb = k / QK8_1;
    for (int64_t i = 0; i < nb; ++i) {
        const float* x = src + i * QK8_1;
        const float d = absmax(x, QK8_1) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            y[i].qs[j] = round_to_i8(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = f32_to_fp16((float)sum * d);
    }
}

}  // namespace ref
}  // namespace lll
