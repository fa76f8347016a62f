// bseq.h — "block-sequential" dot products: one float rounding order shared by every kernel.
//
// For the weight types below, Y[m, n] is defined as a left fold over the weight row's scale
// groups g (a legacy block of 32, or a K-quant super-block of 256), in order:
//
//   acc = 0
//   for g:  isum = exact integer sum of group g (weights x activation quants, minus bias terms)
//           acc  = fmaf((float)isum, d_w[g] * d_x[g], acc)
//           legacy types with a min (Q4_1, Q5_1):  acc = fmaf(m_w[g], s_x[g], acc)
//           Q4_K / Q5_K:                           acc = fmaf((float)msum, -(dmin_w[g] * d_x[g]), acc)
//   Y[m, n] = acc
//
// Integer sums are exact whatever order computes them, and the float operations per (m, n) are
// fixed, so the result does not depend on M, on m's position, on the thread split, on the tile
// shape — nor on the instruction set: the scalar reference, the AVX-512 VNNI kernels and the AMX
// kernels give bit-identical results. That lets prompt batches use wide GEMM kernels (weights
// unpacked once per panel of 16 rows, reused across many activation rows) while one-row decode
// steps still produce exactly the same numbers (batch invariance).
//
// Integer terms per type (x: activation int8 quants; q: weight quants as stored, unsigned):
//   Q4_0: sum (q - 8) x      Q5_0: sum (q - 16) x      Q8_0: sum q x (q signed)
//   Q4_1, Q5_1: sum q x, plus the min term m_w * s_x (s_x: Q8_1's f16 d * sum x)
//   Q4_K, Q5_K: isum = sum_j sc_j sum_{32} q x,  msum = sum_j m_j (sum of x over sub-block j)
//   Q6_K:       isum = sum_h sc_h sum_{16} (q - 32) x   (16 sub-blocks of 16, int8 scales)
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/blocks.h"
#include "backends/cpu/quants/quants.h"

namespace lll {
namespace bseq {

constexpr int kPanel = 16;   // weight rows per packed panel (one zmm lane each)

// The weight types the kernels below are written for: each bseq_*.cpp switch (one template
// instantiation per type) covers exactly these, and the type registry asserts at compile time
// that its block-sequential entries (TypeTraits::bseq) are this list.
constexpr GGMLType kBseqTypes[] = {GGMLType::Q4_0, GGMLType::Q4_1, GGMLType::Q5_0, GGMLType::Q5_1,
                                   GGMLType::Q8_0, GGMLType::Q4_K, GGMLType::Q5_K, GGMLType::Q6_K};

// Whether wtype is block-sequential (the registry's TypeTraits::bseq is not None).
bool supported(GGMLType wtype);
// Its family (BseqFamily::None for other types).
BseqFamily family(GGMLType wtype);

// Scalar reference of the definition above: one weight row . one activation row (quantized to
// type_traits(wtype)->vec_dot_type), n elements.
float dot_ref(GGMLType wtype, int64_t n, const void* w, const void* x);

// Activations split for the kernels: int8 quants row-major [M][K], and per group / unit data.
struct ActPack {
    int64_t M = 0, K = 0;
    int8_t* q = nullptr;          // [M][K]
    float* d = nullptr;           // [M][n_groups]            activation scale per group
    float* s = nullptr;           // [M][n_units]             Q8_1 s (Q4_1 / Q5_1)
    int32_t* nbias = nullptr;     // [M][n_units]             -(bias * sum x) per unit (Q4_0/Q5_0/Q8_0)
    int32_t* bsum = nullptr;      // [M][K / 32]              K-quants: pairs of int16 16-sums
};

// Bytes of scratch needed to pack M activation rows of K for weight type wtype.
size_t act_pack_bytes(GGMLType wtype, int64_t M, int64_t K);

// Splits rows [m0, m1) of Xq (M rows in vec_dot_type, row stride x_stride bytes) into ap, whose
// buffers are carved from `buf` (act_pack_bytes) by act_pack_init.
void act_pack_init(GGMLType wtype, int64_t M, int64_t K, void* buf, ActPack* ap);
void act_pack_rows(GGMLType wtype, const uint8_t* Xq, size_t x_stride, int64_t m0, int64_t m1,
                   ActPack* ap);

// Y[m, n] for all m < ap.M and n in [n0, n1) (n0 a multiple of kPanel): unpacks each panel of 16
// weight rows once per block of activation rows, then runs the VNNI (or AMX) kernels on it.
// W: weight rows of K elements, w_stride bytes apart (GGUF layout), N rows in all (rows >= N
// are not read); or, with `repacked`, the output of repack_panels for those rows.
void matmul_avx512(GGMLType wtype, const uint8_t* W, size_t w_stride, int64_t N, int64_t n0,
                   int64_t n1, const ActPack& ap, float* Y, int64_t ldy, bool use_amx, bool repacked);

// Weights repacked once at load time: per panel of 16 rows, in exactly 16 * w_stride bytes
// (the same size as the GGUF rows), the values the panel unpacker reads (16-row transposes of
// the quants, the scale fields side by side), in the order it reads them. Decode then streams
// contiguous vectors instead of transposing 16 rows on every token. N is padded to whole panels
// (rows past N repeat the last row).
size_t repacked_bytes(GGMLType wtype, int64_t N, size_t w_stride);
void repack_panels(GGMLType wtype, const uint8_t* W, size_t w_stride, int64_t N, int64_t K,
                   uint8_t* dst, int64_t panel0, int64_t panel1);

// The block-sequential types on AVX2 without VNNI (bseq_avx2.cpp): the same results from the
// same repacked panels (or GGUF rows, repacked a panel at a time), each panel as two halves of
// 8 rows. Throws when AVX2 is not compiled in.
void matmul_avx2(GGMLType wtype, const uint8_t* W, size_t w_stride, int64_t N, int64_t n0, int64_t n1,
                 const ActPack& ap, float* Y, int64_t ldy, bool repacked);

// repack_panels in plain C++ (byte for byte the same panels): what CPUs without AVX-512 repack with.
void repack_panels_portable(GGMLType wtype, const uint8_t* W, size_t w_stride, int64_t N, int64_t K,
                            uint8_t* dst, int64_t panel0, int64_t panel1);

// AMX tile support on this CPU and OS (permission requested once); false when not compiled in.
bool amx_available();

}  // namespace bseq
}  // namespace lll
