// blocks.glsl — reading ggml's block formats (csrc/blocks.h) in a shader, one type per
// compilation: BLOCK_TYPE is the ggml type id (-DBLOCK_TYPE=GGML_Q4_K).
//
// Weights are bound as 32-bit words (`wdata`, declared by the including kernel) and read at byte
// offsets: no 8/16-bit storage feature is needed, so every Vulkan 1.1 device runs these. Blocks
// of 18, 22 or 34 bytes straddle words; the host pads each buffer so the word after the last
// byte exists.
//
// decode_chunk16(row_off, c, K, v) gives elements [16c, 16c + 16) of the row whose first byte is
// row_off, in the CPU reference's float operations and order (csrc/quants/ref_*.cpp), `precise`
// where the reference computes a*b+c without fusing: dequantization here is bit-exact with it.
// Plain types zero the elements at or past K (their rows need not be multiples of 16).

#define BYTE_READS_BUFFER wdata
#include "byte_reads.glsl"

// The 16 bytes at off, as 4 words (bytes in little-endian order).
void rd_16_bytes(uint off, out uint w[4]) {
    for (uint i = 0u; i < 4u; ++i) w[i] = rd_u32(off + 4u * i);
}
uint byte_at(uint w[4], uint j) { return (w[j >> 2] >> ((j & 3u) << 3)) & 0xFFu; }

const float kvalues_iq4nl[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                          1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

#if BLOCK_TYPE == GGML_F32 || BLOCK_TYPE == GGML_F16 || BLOCK_TYPE == GGML_BF16
#define BLOCK_ELEMS 16u   // no blocks: chunks of 16 elements, bounded by K
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    for (uint j = 0u; j < 16u; ++j) {
        const uint k = 16u * c + j;
        if (k >= K) { v[j] = 0.0; continue; }
#if BLOCK_TYPE == GGML_F32
        v[j] = uintBitsToFloat(rd_u32(row_off + 4u * k));
#elif BLOCK_TYPE == GGML_F16
        v[j] = rd_f16(row_off + 2u * k);
#else
        v[j] = uintBitsToFloat(rd_u16(row_off + 2u * k) << 16);
#endif
    }
}

#elif BLOCK_TYPE == GGML_Q4_0 || BLOCK_TYPE == GGML_Q4_1 || BLOCK_TYPE == GGML_IQ4_NL || \
      BLOCK_TYPE == GGML_Q5_0 || BLOCK_TYPE == GGML_Q5_1
// 32 per block; element j < 16 is the low nibble of qs[j], element j + 16 its high nibble.
#define BLOCK_ELEMS 32u
#if BLOCK_TYPE == GGML_Q4_1
#define BLOCK_BYTES 20u
#define QS_AT 4u
#elif BLOCK_TYPE == GGML_Q5_0
#define BLOCK_BYTES 22u
#define QS_AT 6u
#elif BLOCK_TYPE == GGML_Q5_1
#define BLOCK_BYTES 24u
#define QS_AT 8u
#else
#define BLOCK_BYTES 18u
#define QS_AT 2u
#endif
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 1) * BLOCK_BYTES;
    const uint hi = c & 1u;
    const float d = rd_f16(b);
    uint qs[4];
    rd_16_bytes(b + QS_AT, qs);
#if BLOCK_TYPE == GGML_Q4_1 || BLOCK_TYPE == GGML_Q5_1
    const float m = rd_f16(b + 2u);
#endif
#if BLOCK_TYPE == GGML_Q5_0
    const uint qh = rd_u32(b + 2u);
#elif BLOCK_TYPE == GGML_Q5_1
    const uint qh = rd_u32(b + 4u);
#endif
    for (uint j = 0u; j < 16u; ++j) {
        const uint q = (byte_at(qs, j) >> (4u * hi)) & 0xFu;
#if BLOCK_TYPE == GGML_Q4_0
        v[j] = float(int(q) - 8) * d;
#elif BLOCK_TYPE == GGML_Q4_1
        precise float y = float(q) * d + m;
        v[j] = y;
#elif BLOCK_TYPE == GGML_IQ4_NL
        v[j] = d * kvalues_iq4nl[q];
#elif BLOCK_TYPE == GGML_Q5_0
        v[j] = float(int(q | (((qh >> (16u * hi + j)) & 1u) << 4)) - 16) * d;
#else
        precise float y = float(q | (((qh >> (16u * hi + j)) & 1u) << 4)) * d + m;
        v[j] = y;
#endif
    }
}

#elif BLOCK_TYPE == GGML_Q8_0
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 34u
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 1) * BLOCK_BYTES;
    const float d = rd_f16(b);
    uint qs[4];
    rd_16_bytes(b + 2u + 16u * (c & 1u), qs);
    for (uint j = 0u; j < 16u; ++j) v[j] = float(bitfieldExtract(int(byte_at(qs, j)), 0, 8)) * d;
}

#else
// K-quants and IQ4_XS: super-blocks of 256, chunk cb = 0..15 of one.
#define BLOCK_ELEMS 256u
#include "blocks_k.glsl"
#endif
