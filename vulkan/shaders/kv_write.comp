#version 450
// kv_write.comp — stores the batch's keys and values, F32 [T, kv_width] each, as F16 in each
// token's slot of one layer's paged cache (the F16 sides of it: `sides`; a quantized side is
// kv_write_quant.comp's). The cache is slot-major ([slot][kv_width], K then V,
// model/kv_cache.h) and read as 32-bit words: one invocation packs one pair of values.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) buffer KV { uint kv[]; };
layout(binding = 1) readonly buffer K { float k[]; };
layout(binding = 2) readonly buffer V { float v[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) readonly buffer SeqOfToken { int seq_of_token[]; };
layout(binding = 5) readonly buffer BlockTables { int block_tables[]; };

layout(push_constant) uniform Push {
    uint T, kv_width, block_size, max_blocks;
    uint v_word_offset;   // where V starts in kv[] (K starts at 0)
    uint sides;           // 1: K, 2: V, 3: both
} pc;

void main() {
    const uint half_width = pc.kv_width / 2u;
    const uint g = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (g >= pc.T * half_width) return;
    const uint t = g / half_width, i = g % half_width;
    const uint pos = uint(positions[t]);
    const uint block = uint(block_tables[uint(seq_of_token[t]) * pc.max_blocks + pos / pc.block_size]);
    const uint slot = block * pc.block_size + pos % pc.block_size;
    const uint src = t * pc.kv_width + 2u * i;
    const uint dst = slot * half_width + i;
    if ((pc.sides & 1u) != 0u) kv[dst] = packHalf2x16(vec2(k[src], k[src + 1u]));
    if ((pc.sides & 2u) != 0u) kv[pc.v_word_offset + dst] = packHalf2x16(vec2(v[src], v[src + 1u]));
}
