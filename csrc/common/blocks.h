// blocks.h — GGUF/ggml block-quantized formats, laid out bit-for-bit as ggml lays them.
//
// One header shared by the C++ core and the CUDA kernels (no host-only includes here).
// Every block struct carries a static_assert on its size: a file written by llama.cpp must
// load here byte for byte, and ours must load there.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Qualifies the inline helpers the kernels share; host code unless the kernels' headers define it
// first (cuda/host_device.cuh: __host__ __device__).
#ifndef LLL_HD
#define LLL_HD
#endif

namespace lll {

// ggml_type ids as stored in GGUF tensor infos (never renumber: they are the file format).
enum class GGMLType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ2_XXS = 16,
    IQ2_XS = 17, IQ3_XXS = 18, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

typedef uint16_t fp16_t;   // IEEE binary16 bits
typedef uint16_t bf16_t;   // bfloat16 bits (upper half of an f32)

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_K = 256;          // super-block size of the K-quants (and IQ4_XS)
constexpr int K_SCALE_SIZE = 12;   // packed 6-bit scales/mins of Q4_K and Q5_K

// Q4_0: 32 weights = d * (q - 8), q in [0, 15]; low nibbles hold elements 0..15, high 16..31.
struct block_q4_0 { fp16_t d; uint8_t qs[QK4_0 / 2]; };
static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 size");

// Q4_1: 32 weights = d * q + m.
struct block_q4_1 { fp16_t d; fp16_t m; uint8_t qs[QK4_1 / 2]; };
static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 size");

// Q5_0: 32 weights = d * (q - 16); q's 5th bits in qh (bit j = element j).
struct block_q5_0 { fp16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 size");

// Q5_1: 32 weights = d * q + m.
struct block_q5_1 { fp16_t d; fp16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 size");

// Q8_0: 32 weights = d * q. Also the activation format paired with Q4_0/Q5_0/Q8_0 weights.
struct block_q8_0 { fp16_t d; int8_t qs[QK8_0]; };
static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 size");

// Q8_1: like Q8_0 plus s = d * sum(qs); the activation format paired with Q4_1/Q5_1.
struct block_q8_1 { fp16_t d; fp16_t s; int8_t qs[QK8_1]; };
static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 size");

// Q2_K: 16 sub-blocks of 16; scales[i] = 4-bit scale | 4-bit min << 4; 2-bit quants.
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; fp16_t d; fp16_t dmin; };
static_assert(sizeof(block_q2_K) == 2 * 2 + QK_K / 16 + QK_K / 4, "block_q2_K size");

// Q3_K: 16 sub-blocks of 16; 6-bit scales packed in 12 bytes; high bit of each quant in hmask.
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; fp16_t d; };
static_assert(sizeof(block_q3_K) == 2 + QK_K / 4 + QK_K / 8 + 12, "block_q3_K size");

// Q4_K: 8 sub-blocks of 32; 6-bit scales and mins packed in 12 bytes; x = d*sc*q - dmin*m.
struct block_q4_K { fp16_t d; fp16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_q4_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2, "block_q4_K size");

// Q5_K: as Q4_K with a 5th bit per quant in qh.
struct block_q5_K {
    fp16_t d; fp16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2 + QK_K / 8, "block_q5_K size");

// Q6_K: 16 sub-blocks of 16 with int8 scales; 4 low bits in ql, 2 high bits in qh.
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; fp16_t d; };
static_assert(sizeof(block_q6_K) == 2 + QK_K / 16 + 3 * QK_K / 4, "block_q6_K size");

// Q8_K: activation format paired with every K-quant; f32 scale, bsums = sums of groups of 16.
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "block_q8_K size");

// The 16 values a 4-bit IQ4_NL / IQ4_XS index stands for (ggml's kvalues_iq4nl), a non-linear
// grid denser near zero.
constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_NL: 32 weights = d * kvalues_iq4nl[q]; low nibbles hold elements 0..15, high 16..31.
// Multiplied with Q8_0 activations.
struct block_iq4_nl { fp16_t d; uint8_t qs[QK4_NL / 2]; };
static_assert(sizeof(block_iq4_nl) == 2 + QK4_NL / 2, "block_iq4_nl size");

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (bias 32): low 4 bits of sub-block j in nibble
// j % 2 of scales_l[j / 2], high 2 bits in bits 2j..2j+1 of scales_h; weight = d * (ls - 32) *
// kvalues_iq4nl[q], nibbles as IQ4_NL per 32. Multiplied with Q8_K activations.
struct block_iq4_xs { fp16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_iq4_xs) == 2 + 2 + QK_K / 64 + QK_K / 2, "block_iq4_xs size");

// ---- low-bit i-quants: super-blocks of 256 whose groups of 8 (IQ2_*) or 4 (IQ3_*) weights are
// points of a fixed lattice grid (csrc/backends/cpu/quants/ref/gen_iq_grids.py: generated from
// gguf-py at build time) times a sign pattern. Multiplied with Q8_K activations.

// IQ2_XXS (2.0625 bpw): per 32 weights two uint32: the first holds 4 grid indices (iq2xxs_grid,
// 256 points of 8), the second 4 x 7 sign bits (ksigns_iq2xs: the 8th sign is the parity) and a
// 4-bit scale ls in bits 28..31; weight = d * (0.5 + ls) / 4 * grid * sign.
struct block_iq2_xxs { fp16_t d; uint16_t qs[QK_K / 8]; };
static_assert(sizeof(block_iq2_xxs) == 2 + QK_K / 8 * 2, "block_iq2_xxs size");

// IQ2_XS (2.3125 bpw): per 8 weights one uint16: 9-bit iq2xs_grid index + 7 sign bits; a 4-bit
// scale per 16 weights (low nibble of scales[j] for the first 16 of group j of 32).
struct block_iq2_xs { fp16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(block_iq2_xs) == 2 + QK_K / 8 * 2 + QK_K / 32, "block_iq2_xs size");

// IQ2_S (2.5625 bpw): 10-bit iq2s_grid indices (low 8 bits in qs[0..31], 2 high bits per index
// in qh), 8 explicit sign bits per 8 weights in qs[32..63], 4-bit scales per 16 as IQ2_XS.
struct block_iq2_s { fp16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(block_iq2_s) == 2 + QK_K / 4 + QK_K / 16, "block_iq2_s size");

// IQ3_XXS (3.0625 bpw): 64 8-bit iq3xxs_grid indices (256 points of 4), then per 32 weights a
// uint32 of 4 x 7 sign bits + 4-bit scale as IQ2_XXS; weight = d * (0.5 + ls) / 2 * grid * sign.
struct block_iq3_xxs { fp16_t d; uint8_t qs[3 * QK_K / 8]; };
static_assert(sizeof(block_iq3_xxs) == 2 + 3 * QK_K / 8, "block_iq3_xxs size");

// IQ3_S (3.4375 bpw): 9-bit iq3s_grid indices (low bits in qs, 9th bits in qh), explicit signs,
// a 4-bit scale per 32 weights: weight = d * (1 + 2 ls) * grid * sign.
constexpr int IQ3S_N_SCALE = QK_K / 64;
struct block_iq3_s {
    fp16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[IQ3S_N_SCALE];
};
static_assert(sizeof(block_iq3_s) == 2 + 13 * (QK_K / 32) + IQ3S_N_SCALE, "block_iq3_s size");

namespace kern { struct KernelSet; }   // csrc/backends/cpu/quants/dot/dot_impl.h

// The family of block-sequential kernels (csrc/backends/cpu/quants/bseq/bseq.h) a weight type runs
// in, i.e. the integer terms of its fold: legacy 32-blocks (with a min term or not), Q4_K / Q5_K
// super-blocks (scales and mins), Q6_K (signed int8 scales). None: not block-sequential (the tile
// kernels run it, from GGUF rows).
enum class BseqFamily : uint8_t { None, Legacy, LegacyMin, KQuant, Q6K };

// Kernel levels (quants.h's Isa: scalar, AVX2, AVX-512, Neon, Dotprod, I8mm): one slot each below.
constexpr int kIsaLevels = 6;

// One activation row -> blocks of an activation type at one ISA level (n a multiple of the block).
typedef void (*ActQuantFn)(const float* x, void* dst, int64_t n);

// One ggml tensor type: its layout and everything the runtime does with it (ggml's type_traits).
// The one table of these is the type registry (csrc/backends/cpu/quants/type_registry.cpp); the
// dispatches of conversions, activation quantization, dot products and repacking read it, as do
// GGUF's type names, Python's GGMLType and the converter's checks, so adding a type is adding
// one entry there (plus, for a block-sequential type, its case in the bseq kernel files, which
// the registry checks at compile time). docs/architecture.md: "Adding a block type".
struct TypeTraits {
    GGMLType id;
    const char* name;        // ggml's name, e.g. "Q4_K"
    int32_t block_elems;     // elements per block (1 for plain types)
    int32_t block_bytes;     // bytes per block
    bool quantized;
    GGMLType vec_dot_type;   // activation format this weight type is multiplied with
    // Host-side operations (null where the type has none; never called from device code):
    // n elements, a multiple of block_elems, already checked by quants.h's entry points.
    void (*dequantize)(const void* src, float* dst, int64_t n);
    void (*quantize)(const float* src, void* dst, int64_t n);   // bit-exact with llama-quantize
    // Dot-product kernel set written for each level (indexed by Isa: scalar, AVX2, AVX-512,
    // Neon, Dotprod, I8mm); a level without one falls back to the level below (kern::find_kernels).
    const kern::KernelSet* (*kernels[kIsaLevels])();
    // As an activation type (some type's vec_dot_type): its quantizer written for each level
    // (ggml's x86 rounding, the same bytes at every level); a level without one falls back to
    // the level below. Null everywhere for types never used as activations.
    ActQuantFn act_quant[kIsaLevels];
    BseqFamily bseq;         // its block-sequential family: repacked into panels at load when not None
    // Importance-weighted quantization of one row of n_per_row (llama-quantize --imatrix: ggml's
    // quantize_<type> with quant_weights); importance = n_per_row floats, or nullptr for the
    // unweighted quantizer's bytes (types without one, IQ2_XXS and IQ2_XS, refuse nullptr). Null
    // for types whose quantizer ignores importances.
    void (*quantize_weighted)(const float* src, void* dst, int64_t n_per_row, const float* importance) = nullptr;
    // llama-quantize refuses this type without an importance matrix (llama-quant.cpp's
    // tensor_requires_imatrix): the converter asks for one.
    bool needs_importance = false;

    constexpr bool repackable() const { return bseq != BseqFamily::None; }
};

// Traits of a type id; nullptr when the id is not a type this runtime supports.
const TypeTraits* type_traits(uint32_t id);
inline const TypeTraits* type_traits(GGMLType t) { return type_traits(static_cast<uint32_t>(t)); }
// ggml's name of any type id it defines, supported here or not (for error messages); nullptr
// for an id ggml does not define.
const char* ggml_type_name(uint32_t id);
// The supported types, in id order.
const TypeTraits* const* supported_types(int* count);

}  // namespace lll
