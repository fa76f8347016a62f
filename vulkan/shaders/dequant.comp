#version 450
// dequant.comp — rows of a block-quantized tensor to f32, bit-exact with the CPU reference.
// GATHER: the rows are ids[r] (token embedding lookup); otherwise rows 0..rows-1.
// One invocation per chunk of 16 elements.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool GATHER = false;

layout(binding = 0) readonly buffer W { uint wdata[]; };
layout(binding = 1) readonly buffer Ids { int ids[]; };
layout(binding = 2) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint K;           // elements per row
    uint row_bytes;
    uint chunks;      // chunks of 16 per row: ceil(K / 16)
} pc;

#include "blocks.glsl"

void main() {
    const uint g = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint row = g / pc.chunks, c = g % pc.chunks;
    if (row >= pc.rows) return;
    const uint src = GATHER ? uint(ids[row]) : row;
    float v[16];
    decode_chunk16(src * pc.row_bytes, c, pc.K, v);
    for (uint j = 0u; j < 16u; ++j) {
        const uint k = 16u * c + j;
        if (k < pc.K) outv[row * pc.K + k] = v[j];
    }
}
