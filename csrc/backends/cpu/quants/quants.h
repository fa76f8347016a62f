// quants.h — conversions between f32 and every block format, and the dot products inference needs.
//
// Reference (scalar) code is always compiled; SIMD paths (AVX2, AVX-512) are compiled when the
// compiler targets them and are held to the scalar reference by tests (tests/test_kernels.py).
#pragma once
#include <stdint.h>
#include "common/blocks.h"

namespace lll {

// Instruction-set level of a kernel. Scalar is always available; x86-64 has AVX2 and AVX512,
// aarch64 has Neon (Advanced SIMD, every armv8-a CPU), Dotprod (Neon + SDOT, FEAT_DotProd) and
// I8mm (Dotprod + SMMLA, FEAT_I8MM).
// Within one architecture a higher value is a superset of the lower ones; the other
// architecture's levels are never available. The values index TypeTraits::kernels / act_quant.
enum class Isa : int { Scalar = 0, AVX2 = 1, AVX512 = 2, Neon = 3, Dotprod = 4, I8mm = 5 };
static_assert((int)Isa::I8mm + 1 == kIsaLevels, "TypeTraits holds one kernel slot per level");
Isa best_isa();                      // the fastest level compiled in and supported by this CPU
bool isa_available(Isa isa);         // compiled in and supported by this CPU
const char* isa_name(Isa isa);
// This architecture's levels, lowest (Scalar) first: {scalar, avx2, avx512} or {scalar, neon, dotprod, i8mm}.
const Isa* isa_levels(int* count);
// Whether the repacked decode kernels (1-3 rows) prefetch panels ahead in software (isa.cpp).
bool replay_prefetch_pays();
// Whether Q6_K's prompt kernels scale unit sums with shuffle + vpdpwssd instead of vpmulld (isa.cpp).
bool q6k_scale_split_pays();

// ---- reference conversions (csrc/backends/cpu/quants/ref/ref_*.cpp); n is a multiple of the block size ----
// dequantize_row: blocks of type `type` -> n floats.  Supported: every type in blocks.h.
void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n);
// quantize_row_ref: n floats -> blocks, bit-exact with ggml's quantize_row_*_ref (and gguf-py).
void quantize_row_ref(GGMLType type, const float* src, void* dst, int64_t n);
bool can_quantize(GGMLType type);
// quantize_row_weighted: one row of n floats -> blocks, weighted by `importance` (n floats: the
// imatrix's per-column mean squared activation) as llama-quantize --imatrix does, byte for byte
// with ggml's quantize_<type>(src, dst, 1, n, importance); importance nullptr: quantize_row_ref's
// bytes. Types whose ggml quantizer ignores importances (Q8_0, the float types) give
// quantize_row_ref's bytes either way; types with no unweighted quantizer (IQ2_XXS, IQ2_XS) throw
// std::invalid_argument on nullptr.
void quantize_row_weighted(GGMLType type, const float* src, void* dst, int64_t n, const float* importance);

// ---- activation quantization + dot products (csrc/backends/cpu/quants/dot/dot_*.cpp) ----
// quantize_act_row: one activation row -> vec_dot_type blocks, as ggml's CPU backend does it
// (its x86 SIMD rounding), at the given ISA level (levels must agree bit for bit).
void quantize_act_row(GGMLType vec_dot_type, const float* x, void* dst, int64_t n, Isa isa);
// vec_dot: one weight row (type `wtype`, n elements) . one activation row already in
// type_traits(wtype)->vec_dot_type. Returns the f32 result.
typedef float (*VecDotFn)(int64_t n, const void* w, const void* x);
VecDotFn vec_dot_fn(GGMLType wtype, Isa isa);   // nullptr when not available at that level

}  // namespace lll
