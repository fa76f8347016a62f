#version 450
// linear_matvec.comp — y[T, N] = x[T, K] . W[N, K]^T for few tokens (decode): each workgroup
// owns NUM_ROWS weight rows; its invocations stride over the rows' 16-element chunks,
// dequantizing each chunk once for all (up to MAX_COLS) tokens, and the partial sums meet by
// subgroupAdd and then across subgroups in shared memory. Weight reads are the cost here, so
// every weight byte is read once per dispatch.
#include "common.glsl"

layout(local_size_x_id = 0) in;   // host: 128

#define NUM_ROWS 2u
#define MAX_COLS 4u
#define MAX_SUBGROUPS 64u          // workgroup size / smallest subgroup (4)

layout(binding = 0) readonly buffer W { uint wdata[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint N, K, T;   // T <= MAX_COLS
    uint row_bytes;
} pc;

#include "blocks.glsl"

shared float partial[NUM_ROWS * MAX_COLS][MAX_SUBGROUPS];

void main() {
    const uint row0 = flat_group_id() * NUM_ROWS;
    if (row0 >= pc.N) return;   // whole workgroup: uniform
    const uint chunks = (pc.K + 15u) / 16u;
    float acc[NUM_ROWS][MAX_COLS];
    for (uint r = 0u; r < NUM_ROWS; ++r)
        for (uint t = 0u; t < MAX_COLS; ++t) acc[r][t] = 0.0;

    for (uint c = gl_LocalInvocationID.x; c < chunks; c += gl_WorkGroupSize.x) {
        const uint k0 = 16u * c, kn = min(16u, pc.K - k0);
        for (uint r = 0u; r < NUM_ROWS; ++r) {
            if (row0 + r >= pc.N) break;
            float w[16];
            decode_chunk16((row0 + r) * pc.row_bytes, c, pc.K, w);
            for (uint t = 0u; t < MAX_COLS; ++t) {
                if (t >= pc.T) break;
                float s = 0.0;
                for (uint j = 0u; j < kn; ++j) s += w[j] * x[t * pc.K + k0 + j];
                acc[r][t] += s;
            }
        }
    }

    for (uint r = 0u; r < NUM_ROWS; ++r)
        for (uint t = 0u; t < MAX_COLS; ++t) {
            const float s = subgroupAdd(acc[r][t]);
            if (subgroupElect()) partial[r * MAX_COLS + t][gl_SubgroupID] = s;
        }
    barrier();
    const uint o = gl_LocalInvocationID.x;
    if (o < NUM_ROWS * MAX_COLS) {
        const uint r = o / MAX_COLS, t = o % MAX_COLS;
        if (row0 + r < pc.N && t < pc.T) {
            float s = 0.0;
            for (uint i = 0u; i < gl_NumSubgroups; ++i) s += partial[o][i];
            y[t * pc.N + row0 + r] = s;
        }
    }
}
