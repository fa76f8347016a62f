// blocks.h — GGUF/ggml block-quantized formats, laid out bit-for-bit as ggml lays them.
//
// One header shared by the C++ core and the CUDA kernels (no host-only includes here).
// Every block struct carries a static_assert on its size: a file written by llama.cpp must
// load here byte for byte, and ours must load there.
#pragma once
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define LLL_HD __host__ __device__
#else
#define LLL_HD
#endif

namespace lll {

// ggml_type ids as stored in GGUF tensor infos (never renumber: they are the file format).
enum class GGMLType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
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
constexpr int QK_K = 256;          // super-block size of the K-quants
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

// Static description of a tensor element type.
struct TypeTraits {
    const char* name;        // ggml's name, e.g. "Q4_K"
    int32_t block_elems;     // elements per block (1 for plain types)
    int32_t block_bytes;     // bytes per block
    bool quantized;
    GGMLType vec_dot_type;   // activation format this weight type is multiplied with
};

// Traits of a type id; nullptr when the id is not a type this runtime knows.
inline const TypeTraits* type_traits(uint32_t id) {
    // Indexed by id; entries with block_elems == 0 are ids we do not support.
    static constexpr TypeTraits table[] = {
        /* 0 F32  */ {"F32", 1, 4, false, GGMLType::F32},
        /* 1 F16  */ {"F16", 1, 2, false, GGMLType::F16},
        /* 2 Q4_0 */ {"Q4_0", QK4_0, sizeof(block_q4_0), true, GGMLType::Q8_0},
        /* 3 Q4_1 */ {"Q4_1", QK4_1, sizeof(block_q4_1), true, GGMLType::Q8_1},
        /* 4      */ {nullptr, 0, 0, false, GGMLType::F32},
        /* 5      */ {nullptr, 0, 0, false, GGMLType::F32},
        /* 6 Q5_0 */ {"Q5_0", QK5_0, sizeof(block_q5_0), true, GGMLType::Q8_0},
        /* 7 Q5_1 */ {"Q5_1", QK5_1, sizeof(block_q5_1), true, GGMLType::Q8_1},
        /* 8 Q8_0 */ {"Q8_0", QK8_0, sizeof(block_q8_0), true, GGMLType::Q8_0},
        /* 9 Q8_1 */ {"Q8_1", QK8_1, sizeof(block_q8_1), true, GGMLType::Q8_1},
        /* 10 Q2_K */ {"Q2_K", QK_K, sizeof(block_q2_K), true, GGMLType::Q8_K},
        /* 11 Q3_K */ {"Q3_K", QK_K, sizeof(block_q3_K), true, GGMLType::Q8_K},
        /* 12 Q4_K */ {"Q4_K", QK_K, sizeof(block_q4_K), true, GGMLType::Q8_K},
        /* 13 Q5_K */ {"Q5_K", QK_K, sizeof(block_q5_K), true, GGMLType::Q8_K},
        /* 14 Q6_K */ {"Q6_K", QK_K, sizeof(block_q6_K), true, GGMLType::Q8_K},
        /* 15 Q8_K */ {"Q8_K", QK_K, sizeof(block_q8_K), true, GGMLType::Q8_K},
        /* 16..23: IQ formats, not supported */
        {nullptr, 0, 0, false, GGMLType::F32}, {nullptr, 0, 0, false, GGMLType::F32},
        {nullptr, 0, 0, false, GGMLType::F32}, {nullptr, 0, 0, false, GGMLType::F32},
        {nullptr, 0, 0, false, GGMLType::F32}, {nullptr, 0, 0, false, GGMLType::F32},
        {nullptr, 0, 0, false, GGMLType::F32}, {nullptr, 0, 0, false, GGMLType::F32},
        /* 24 I8  */ {"I8", 1, 1, false, GGMLType::I8},
        /* 25 I16 */ {"I16", 1, 2, false, GGMLType::I16},
        /* 26 I32 */ {"I32", 1, 4, false, GGMLType::I32},
        /* 27 I64 */ {"I64", 1, 8, false, GGMLType::I64},
        /* 28 F64 */ {"F64", 1, 8, false, GGMLType::F64},
        /* 29 IQ1_M */ {nullptr, 0, 0, false, GGMLType::F32},
        /* 30 BF16 */ {"BF16", 1, 2, false, GGMLType::BF16},
    };
    constexpr uint32_t n = sizeof(table) / sizeof(table[0]);
    if (id >= n || table[id].block_elems == 0) return nullptr;
    return &table[id];
}

inline const TypeTraits* type_traits(GGMLType t) { return type_traits(static_cast<uint32_t>(t)); }

}  // namespace lll
