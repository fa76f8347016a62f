#version 450
// linear_matvec.comp — y[T, N] = x[T, K] . W[N, K]^T for few tokens (decode): each workgroup
// owns NUM_ROWS weight rows; each invocation takes one segment of consecutive 32-element blocks
// of the rows (matvec_sums.glsl), dequantize each block once for all
// (up to MAX_COLS) tokens and sum its products (block_dot.glsl's chain); the block sums are added in block
// order (matvec_sums.glsl), the tiled kernel's order, so a token's outputs do not depend on the
// batch it came in. Weight reads are the cost here, so every weight byte is read once per
// dispatch. Every loop has a constant trip count (bounds are uniform branches inside), so
// compilers unroll them and keep the arrays in registers.
#include "common.glsl"

// host: the device's subgroup size (8 on lavapipe, 32 on NVIDIA, 32-64 on AMD and Intel), at
// least 8 and at most 64.
layout(local_size_x_id = 0) in;

// Rows per workgroup (host: 2 on GPUs, so a small matrix still spreads over every compute unit;
// 8 on CPU implementations, where each workgroup has a fixed cost worth spreading over more rows).
layout(constant_id = 1) const uint NUM_ROWS = 2u;
#define MAX_COLS 4u

layout(binding = 0) readonly buffer W { uint wdata[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer X4 { vec4 x4[]; };   // the same buffer, 16-byte reads
layout(binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint N, K, T;   // T <= MAX_COLS
    uint row_bytes;
    uint ldy, y0;   // y row t, column n is y[t * ldy + y0 + n] (a row window's columns of a wider y)
    uint seg_blocks;   // blocks per segment (matvec_sums.glsl)
} pc;

#include "blocks.glsl"
#include "block_dot.glsl"
#include "matvec_sums.glsl"

// Elements [k0, k0 + 16) of token t's activations; zeros past K.
void load_x16(uint t, uint k0, out vec4 xv[4]) {
    if ((pc.K & 3u) == 0u && k0 + 16u <= pc.K) {   // rows start 16-byte aligned: vec4 reads
        const uint base = (t * pc.K + k0) >> 2;
        for (uint i = 0u; i < 4u; ++i) xv[i] = x4[base + i];
        return;
    }
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) {
            const uint k = k0 + 4u * i + j;
            xv[i][j] = k < pc.K ? x[t * pc.K + k] : 0.0;
        }
}

void main() {
    const uint row0 = flat_group_id() * NUM_ROWS;
    if (row0 >= pc.N) return;   // whole workgroup: uniform
    const uint blocks = (pc.K + 31u) / 32u;
    float seg[NUM_ROWS][MAX_COLS];
    for (uint r = 0u; r < NUM_ROWS; ++r)
        for (uint t = 0u; t < MAX_COLS; ++t) seg[r][t] = 0.0;
    const uint b_end = segment_end(blocks);
    for (uint b = segment_begin(); b < b_end; ++b) {
        float c[NUM_ROWS][MAX_COLS];
        for (uint r = 0u; r < NUM_ROWS; ++r)
            for (uint t = 0u; t < MAX_COLS; ++t) c[r][t] = 0.0;
        for (uint h = 0u; h < 2u; ++h) {   // the block's halves: the chain goes on from the first
            vec4 xv[MAX_COLS][4];
            for (uint t = 0u; t < MAX_COLS; ++t)
                if (t < pc.T) load_x16(t, 32u * b + 16u * h, xv[t]);
            for (uint r = 0u; r < NUM_ROWS; ++r) {
                if (row0 + r < pc.N) {
                    float w[16];
                    decode_chunk16((row0 + r) * pc.row_bytes, 2u * b + h, pc.K, w);
                    for (uint t = 0u; t < MAX_COLS; ++t)
                        if (t < pc.T) c[r][t] = chain16(w, xv[t], c[r][t]);
                }
            }
        }
        for (uint r = 0u; r < NUM_ROWS; ++r)
            for (uint t = 0u; t < MAX_COLS; ++t) {
                precise float v = seg[r][t] + c[r][t];
                seg[r][t] = v;
            }
    }
    store_row_sums(row0, blocks, seg);
}
