// kv_quant.glsl — a quantized KV cache (q8_0 / q4_0, model/kv_cache.h) in a shader: the
// Walsh-Hadamard rotation of one head's values in shared memory, ggml's CPU quantizers of a cache
// row, and reads of the stored values. The including kernel declares the cache as `kv` (32-bit
// words) and MAX_HEAD_DIM; every function with "head" in its name is called by the whole
// workgroup (it has barriers).
//
// The float operations and their order are the CPU's (kv_cache.cpp hadamard_rotate,
// act_quant.cpp q8_block_scalar, ref_legacy.cpp quantize_q4_0), so the stored bytes are the
// CPU's wherever the device rounds division and f16 conversion as IEEE does (lavapipe does).

#define BYTE_READS_BUFFER kv
#include "byte_reads.glsl"

#define QK 32u                                  // values per q8_0 / q4_0 block
#define Q8_0_BYTES 34u                          // f16 d, 32 int8
#define Q4_0_BYTES 18u                          // f16 d, 16 bytes of two nibbles

shared float head_s[MAX_HEAD_DIM];              // one head's values
#ifdef INT8_DOT   // keys against the q8_0 query by integer dot products (sdot.glsl)
#include "sdot.glsl"
shared uint qw_s[MAX_HEAD_DIM / 4u];            // the query's quants, 4 a word
shared float qd_s[MAX_HEAD_DIM / QK];           // its block scales
#endif

// head_s[0, n) -> H head_s chunk by chunk, H the orthonormal rot x rot Walsh-Hadamard matrix:
// butterflies (a + b, a - b) stage by stage, then the scale (the host's float(1 / sqrt(rot))).
void rotate_head(uint n, uint rot, float scale) {
    const uint lid = gl_LocalInvocationID.x, group = gl_WorkGroupSize.x;
    barrier();
    for (uint h = 1u; h < rot; h *= 2u) {
        for (uint p = lid; p < n / 2u; p += group) {   // pair p: chunk p / (rot/2), its j and j + h
            const uint c = p / (rot / 2u), k = p % (rot / 2u);
            const uint j = c * rot + (k / h) * 2u * h + k % h;
            const float a = head_s[j], b = head_s[j + h];
            head_s[j] = a + b;
            head_s[j + h] = a - b;
        }
        barrier();
    }
    for (uint d = lid; d < n; d += group) head_s[d] *= scale;
    barrier();
}

// Block b of head_s as q8_0: q = round-half-even(x * 127 / amax), d = amax / 127 (ggml's x86
// activation quantizer, which the CPU cache stores with). Returns d rounded to f16.
float q8_0_block(uint b, out int q[QK]) {
    float amax = 0.0;
    for (uint i = 0u; i < QK; ++i) amax = max(amax, abs(head_s[b * QK + i]));
    const float id = amax != 0.0 ? 127.0 / amax : 0.0;
    for (uint i = 0u; i < QK; ++i) q[i] = clamp(int(roundEven(head_s[b * QK + i] * id)), -128, 127);
    return unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
}

// head_s[0, n) through a q8_0 round trip (the query as a quantized K cache's dot product takes it).
void q8_0_round_trip_head(uint n) {
    const uint lid = gl_LocalInvocationID.x;
    int q[QK];
    float d = 0.0;
    if (lid < n / QK) d = q8_0_block(lid, q);
    barrier();
    if (lid < n / QK)
        for (uint i = 0u; i < QK; ++i) head_s[lid * QK + i] = float(q[i]) * d;
    barrier();
}

#ifdef INT8_DOT
// head_s[0, n) as q8_0 into qw_s, qd_s: the same quants and scales as q8_0_round_trip_head's.
void q8_0_pack_head(uint n) {
    const uint lid = gl_LocalInvocationID.x;
    if (lid < n / QK) {
        int q[QK];
        qd_s[lid] = q8_0_block(lid, q);
        for (uint w = 0u; w < 8u; ++w)
            qw_s[lid * 8u + w] = (uint(q[4u * w]) & 0xFFu) | ((uint(q[4u * w + 1u]) & 0xFFu) << 8) |
                                 ((uint(q[4u * w + 2u]) & 0xFFu) << 16) | (uint(q[4u * w + 3u]) << 24);
    }
    barrier();
}
#endif  // INT8_DOT

#ifdef KV_STORE   // the writing kernel's (kv writable)
// Stores the 16-bit units u[0, n) at byte `off` (even). Words this block shares with a neighbour
// (at most its first and last) are updated with atomics on its own half only.
#define STORE_HALVES(u, n, off)                                                   \
    for (uint i_ = 0u; i_ < (n);) {                                               \
        const uint at_ = (off) + 2u * i_;                                         \
        if ((at_ & 2u) == 0u && i_ + 1u < (n)) {                                  \
            kv[at_ >> 2] = u[i_] | (u[i_ + 1u] << 16);                            \
            i_ += 2u;                                                             \
        } else {                                                                  \
            const uint shift_ = (at_ & 2u) << 3;                                  \
            atomicAnd(kv[at_ >> 2], ~(0xFFFFu << shift_));                        \
            atomicOr(kv[at_ >> 2], u[i_] << shift_);                              \
            i_ += 1u;                                                             \
        }                                                                         \
    }

// Block b of head_s quantized to the cache's type, stored at byte `off`.
void store_q8_0_block(uint b, uint off) {
    int q[QK];
    const float d = q8_0_block(b, q);
    uint u[17];
    u[0] = packHalf2x16(vec2(d, 0.0));
    for (uint i = 0u; i < 16u; ++i) u[1u + i] = (uint(q[2u * i]) & 0xFFu) | ((uint(q[2u * i + 1u]) & 0xFFu) << 8);
    STORE_HALVES(u, 17u, off)
}

// ggml's reference q4_0: d = -(the value of largest magnitude, the first on ties) / 8,
// q = min(15, trunc(x / d + 8.5)); element i in the low nibble of byte i, i + 16 in the high.
void store_q4_0_block(uint b, uint off) {
    float amax = 0.0, vmax = 0.0;
    for (uint i = 0u; i < QK; ++i) {
        const float x = head_s[b * QK + i];
        if (amax < abs(x)) { amax = abs(x); vmax = x; }
    }
    const float d = vmax / -8.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    uint u[9];
    u[0] = packHalf2x16(vec2(d, 0.0));
    for (uint i = 0u; i < 16u; i += 2u) {
        uint pair = 0u;
        for (uint k = 0u; k < 2u; ++k) {
            precise const float lo = head_s[b * QK + i + k] * id + 8.5;
            precise const float hi = head_s[b * QK + i + k + 16u] * id + 8.5;
            const uint q0 = uint(min(15, int(lo))), q1 = uint(min(15, int(hi)));
            pair |= (q0 | (q1 << 4)) << (8u * k);
        }
        u[1u + i / 2u] = pair;
    }
    STORE_HALVES(u, 9u, off)
}
#endif  // KV_STORE

// Value i (< 32) of the block at byte `off`, as the CPU's dequantizer gives it: q * d.
float q8_0_value(uint off, uint i) { return float(rd_i8(off + 2u + i)) * rd_f16(off); }
float q4_0_value(uint off, uint i) {
    const uint byte = rd_u8(off + 2u + (i & 15u));
    return float(int(i < 16u ? byte & 15u : byte >> 4) - 8) * rd_f16(off);
}

// Quants 4j..4j+3 (j < 8) of the block at byte `off`, as 4 packed int8 (the word reads straddle
// when the block starts 2 bytes into a word). Q4_0's nibble b becomes the byte b - 8, bytewise:
// b + 0x78 carries out of no byte, and the top bit flipped makes it signed.
uint q8_0_quad(uint off, uint j) { return rd_u32(off + 2u + 4u * j); }
uint q4_0_quad(uint off, uint j) {   // low nibbles: elements 0-15, high: 16-31
    const uint word = rd_u32(off + 2u + 4u * (j & 3u));
    return (((j < 4u ? word : word >> 4) & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
}

#ifdef KEY_QUAD   // the including kernel's K type: KEY_QUAD (q8_0_quad or q4_0_quad), KEY_BYTES
// The query . the key row of n values at byte `off`, block by block: with INT8_DOT the integer
// sum of the quants' products scaled by both blocks' d (llama.cpp's CPU vec_dot_q8_0_q8_0 /
// _q4_0_q8_0), else the float round trip of the query in head_s times the quants, times d.
float dot_head_key(uint off, uint n) {
    float sum = 0.0;
    for (uint b = 0u; b < n / QK; ++b, off += KEY_BYTES) {
#ifdef INT8_DOT
        int s = 0;
        for (uint j = 0u; j < 8u; ++j) s += sdot4(qw_s[b * 8u + j], KEY_QUAD(off, j), 0);
        sum = fma(float(s), qd_s[b] * rd_f16(off), sum);
#else
        float block = 0.0;
        for (uint j = 0u; j < 8u; ++j) {
            const int quad = int(KEY_QUAD(off, j));
            for (uint k = 0u; k < 4u; ++k)
                block = fma(head_s[b * QK + 4u * j + k], float(bitfieldExtract(quad, int(8u * k), 8)), block);
        }
        sum = fma(block, rd_f16(off), sum);
#endif
    }
    return sum;
}
#endif  // KEY_QUAD
