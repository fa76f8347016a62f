#version 450
// quantize_q8_1.comp — x[T, K] (K a multiple of 32) to ggml's q8_1 form for the integer-dot
// kernels: each 32-element block b of token t becomes 8 words of packed int8 quants q (4 per word,
// element 4i + j in byte j of word i) and (d, s): q = round(x / d) with d = max|x| / 127 (ties
// away from zero, as ggml's roundf), d and s = d * sum(q) rounded to f16 as the CPU's q8_1 stores
// them. One invocation per block: the block's 32 floats are its own, so no reduction is shared.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Q { uint q[]; };      // [T * K / 32 * 8] words, then ...
layout(binding = 1) writeonly buffer QD { vec2 qd[]; };    // ... [T * K / 32] (d, s) from d_base

layout(push_constant) uniform Push {
    uint T, K;
    uint d_base;    // index of the first (d, s) in qd: the quants' bytes / 8
} pc;

float f16_round(float v) { return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x; }

void main() {
    const uint blocks_per_row = pc.K / 32u;
    const uint blk = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (blk >= pc.T * blocks_per_row) return;
    const uint x0 = (blk / blocks_per_row) * pc.K + (blk % blocks_per_row) * 32u;
    float amax = 0.0;
    for (uint i = 0u; i < 32u; ++i) amax = max(amax, abs(x[x0 + i]));
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    int sum = 0;
    for (uint w = 0u; w < 8u; ++w) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; ++j) {
            const float v = x[x0 + 4u * w + j] * id;
            const int qi = int(sign(v) * floor(abs(v) + 0.5));
            sum += qi;
            word |= (uint(qi) & 0xFFu) << (8u * j);
        }
        q[blk * 8u + w] = word;
    }
    qd[pc.d_base + blk] = vec2(f16_round(d), f16_round(d * float(sum)));
}
