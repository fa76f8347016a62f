#version 450
// rms_norm.comp — per row of n: y = x / sqrt(mean(x^2) + eps) * w, one workgroup per row; the
// sum of squares is reduced by subgroupAdd, then across subgroups in shared memory.
#include "common.glsl"

layout(local_size_x_id = 0) in;   // host: 256

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { float w[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows, n;
    float eps;
    uint has_w;
} pc;

shared float partial[64];   // one per subgroup (workgroup size / smallest subgroup)

void main() {
    const uint row = flat_group_id();
    if (row >= pc.rows) return;
    const uint base = row * pc.n;
    float s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += gl_WorkGroupSize.x) s += x[base + i] * x[base + i];
    s = subgroupAdd(s);
    if (subgroupElect()) partial[gl_SubgroupID] = s;
    barrier();
    float total = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) total += partial[i];
    const float scale = 1.0 / sqrt(total / float(pc.n) + pc.eps);
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += gl_WorkGroupSize.x) {
        const float v = x[base + i] * scale;
        y[base + i] = pc.has_w != 0u ? v * w[i] : v;
    }
}
