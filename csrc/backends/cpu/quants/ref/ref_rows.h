// ref_rows.h — per-format reference kernels behind dequantize_row / quantize_row_ref.
//
// Private to csrc/backends/cpu/quants/ref/ref_*.cpp: ref_dispatch.cpp validates the type and n, then calls one of
// these. Every kernel takes k = the number of elements, already a multiple of the block size.
// The arithmetic mirrors ggml's dequantize_row_* / quantize_row_*_ref operation for operation
// (same float ops in the same order, no FMA contraction), so the bytes match llama.cpp's.
#pragma once
#include <stdint.h>

namespace lll {
namespace ref {

typedef void (*DequantizeFn)(const void* src, float* dst, int64_t k);
typedef void (*QuantizeFn)(const float* src, void* dst, int64_t k);

// ---- plain types (ref_legacy.cpp) ----
void dequantize_f32(const void* src, float* dst, int64_t k);
void dequantize_f16(const void* src, float* dst, int64_t k);
void dequantize_bf16(const void* src, float* dst, int64_t k);
void dequantize_f64(const void* src, float* dst, int64_t k);
void dequantize_i8(const void* src, float* dst, int64_t k);
void dequantize_i16(const void* src, float* dst, int64_t k);
void dequantize_i32(const void* src, float* dst, int64_t k);
void dequantize_i64(const void* src, float* dst, int64_t k);
void quantize_f32(const float* src, void* dst, int64_t k);
void quantize_f16(const float* src, void* dst, int64_t k);
void quantize_bf16(const float* src, void* dst, int64_t k);

// ---- legacy 32-element blocks (ref_legacy.cpp) ----
void dequantize_q4_0(const void* src, float* dst, int64_t k);
void dequantize_q4_1(const void* src, float* dst, int64_t k);
void dequantize_q5_0(const void* src, float* dst, int64_t k);
void dequantize_q5_1(const void* src, float* dst, int64_t k);
void dequantize_q8_0(const void* src, float* dst, int64_t k);
void dequantize_q8_1(const void* src, float* dst, int64_t k);
void quantize_q4_0(const float* src, void* dst, int64_t k);
void quantize_q4_1(const float* src, void* dst, int64_t k);
void quantize_q5_0(const float* src, void* dst, int64_t k);
void quantize_q5_1(const float* src, void* dst, int64_t k);
void quantize_q8_0(const float* src, void* dst, int64_t k);
void quantize_q8_1(const float* src, void* dst, int64_t k);

// ---- K-quants, 256-element super-blocks (ref_kquants.cpp) ----
void dequantize_q2_K(const void* src, float* dst, int64_t k);
void dequantize_q3_K(const void* src, float* dst, int64_t k);
void dequantize_q4_K(const void* src, float* dst, int64_t k);
void dequantize_q5_K(const void* src, float* dst, int64_t k);
void dequantize_q6_K(const void* src, float* dst, int64_t k);
void dequantize_q8_K(const void* src, float* dst, int64_t k);
void quantize_q2_K(const float* src, void* dst, int64_t k);
void quantize_q3_K(const float* src, void* dst, int64_t k);
void quantize_q4_K(const float* src, void* dst, int64_t k);
void quantize_q5_K(const float* src, void* dst, int64_t k);
void quantize_q6_K(const float* src, void* dst, int64_t k);
void quantize_q8_K(const float* src, void* dst, int64_t k);

// ---- 4-bit non-linear formats (ref_iquants.cpp) ----
void dequantize_iq4_nl(const void* src, float* dst, int64_t k);
void dequantize_iq4_xs(const void* src, float* dst, int64_t k);
void quantize_iq4_nl(const float* src, void* dst, int64_t k);
void quantize_iq4_xs(const float* src, void* dst, int64_t k);

// ---- low-bit i-quants (ref_iq_lowbit.cpp) ----
void dequantize_iq2_xxs(const void* src, float* dst, int64_t k);
void dequantize_iq2_xs(const void* src, float* dst, int64_t k);
void dequantize_iq2_s(const void* src, float* dst, int64_t k);
void dequantize_iq3_xxs(const void* src, float* dst, int64_t k);
void dequantize_iq3_s(const void* src, float* dst, int64_t k);
// Quantizers (ref_iq_quant.cpp), byte-identical with ggml's quantize_iq*: `importance` holds k
// weights or is null (IQ2_XXS / IQ2_XS need it; the dispatch refuses null for them).
typedef void (*QuantizeWeightedFn)(const float* src, void* dst, int64_t k, const float* importance);
void quantize_weighted_iq2_xxs(const float* src, void* dst, int64_t k, const float* importance);
void quantize_weighted_iq2_xs(const float* src, void* dst, int64_t k, const float* importance);
void quantize_weighted_iq2_s(const float* src, void* dst, int64_t k, const float* importance);
void quantize_weighted_iq3_xxs(const float* src, void* dst, int64_t k, const float* importance);
void quantize_weighted_iq3_s(const float* src, void* dst, int64_t k, const float* importance);
// Without importance weights (ggml's quantize_row_iq*_ref): weights from x itself.
void quantize_iq2_s(const float* src, void* dst, int64_t k);
void quantize_iq3_xxs(const float* src, void* dst, int64_t k);
void quantize_iq3_s(const float* src, void* dst, int64_t k);
// ggml's make_qp_quants (ref_weighted.cpp): levels L[i] in [0, nmax] for x (the K-quants'
// sub-block scales and mins, the i-quants' group magnitudes: a negative level wraps in the uint8,
// as in ggml) by a weighted search; returns the scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* w);

// ---- importance-weighted quantization of one row of n (ref_weighted.cpp, ref_iquants.cpp) ----
// qw: n importances (the imatrix's per-column mean squared activation), or null: the unweighted
// quantizer's bytes (what ggml's quantize_<type> writes without quant_weights).
void quantize_weighted_q2_K(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q3_K(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q4_K(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q5_K(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q6_K(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q4_0(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q4_1(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q5_0(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_q5_1(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_iq4_nl(const float* src, void* dst, int64_t n, const float* qw);
void quantize_weighted_iq4_xs(const float* src, void* dst, int64_t n, const float* qw);

// float -> int32 truncation as x86's cvttss2si does it, without C++'s undefined behaviour:
// NaN and values outside the int32 range give INT32_MIN. ggml's `(int8_t)(x + 8.5f)` style
// casts compile to exactly this followed by keeping the low bits.
inline int32_t trunc_to_i32(float v) {
    if (!(v > -2147483904.0f && v < 2147483648.0f)) return INT32_MIN;
    return (int32_t)v;
}

}  // namespace ref
}  // namespace lll
