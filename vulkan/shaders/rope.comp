#version 450
// rope.comp — rotary embedding in place on x[T, n_heads, head_dim] with the CPU's angle table
// cs[T][rope_dims] ((cos, sin) per pair, ops.h rope_table): normal style rotates (v[2i],
// v[2i+1]), NeoX (v[i], v[i + rope_dims/2]). One invocation per pair, the CPU's FMAs.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer CS { float cs[]; };

layout(push_constant) uniform Push {
    uint T, n_heads, head_dim, rope_dims;
    uint neox;
} pc;

void main() {
    const uint pairs = pc.rope_dims / 2u;
    const uint g = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (g >= pc.T * pc.n_heads * pairs) return;
    const uint i = g % pairs, head = g / pairs;   // head: t * n_heads + h
    const uint t = head / pc.n_heads;
    const float c = cs[t * pc.rope_dims + 2u * i], s = cs[t * pc.rope_dims + 2u * i + 1u];
    const uint base = head * pc.head_dim;
    const uint a = base + (pc.neox != 0u ? i : 2u * i);
    const uint b = base + (pc.neox != 0u ? i + pairs : 2u * i + 1u);
    const float x0 = x[a], x1 = x[b];
    x[a] = fma(x0, c, -(x1 * s));
    x[b] = fma(x0, s, x1 * c);
}
