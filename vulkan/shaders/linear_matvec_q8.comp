#version 450
// linear_matvec_q8.comp — y[T, N] = x[T, K] . W[N, K]^T for few tokens with integer dot products
// (VK_KHR_shader_integer_dot_product): x comes quantized to q8_1 by quantize_q8_1.comp, each
// 32 weights are unpacked to packed int8 (blocks_i8.glsl) once for all tokens, and
// OpSDot multiplies four int8 pairs per instruction. As in linear_matvec.comp: NUM_ROWS rows per
// workgroup, each invocation on one segment of consecutive blocks, the block sums (block_sum_i8)
// added in matvec_sums.glsl's order, as linear_tiled_q8.comp adds them.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint NUM_ROWS = 2u;
#define MAX_COLS 4u

layout(binding = 0) readonly buffer W { uint wdata[]; };
layout(binding = 1) readonly buffer XQ { uvec4 xq[]; };   // quantize_q8_1.comp's words, 2 per block
layout(binding = 1) readonly buffer XD { vec2 xd[]; };    // its (d, s), from d_base
layout(binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint N, K, T;   // T <= MAX_COLS, K a multiple of 32
    uint row_bytes;
    uint ldy, y0;
    uint seg_blocks;   // blocks per segment (matvec_sums.glsl)
    uint d_base;
} pc;

#include "sdot.glsl"

#include "blocks.glsl"
#include "blocks_i8.glsl"

#include "matvec_sums.glsl"


void main() {
    const uint row0 = flat_group_id() * NUM_ROWS;
    if (row0 >= pc.N) return;   // whole workgroup: uniform
    const uint blocks = pc.K / 32u;
    float seg[NUM_ROWS][MAX_COLS];
    for (uint r = 0u; r < NUM_ROWS; ++r)
        for (uint t = 0u; t < MAX_COLS; ++t) seg[r][t] = 0.0;
    const uint b_end = segment_end(blocks);
    for (uint b = segment_begin(); b < b_end; ++b) {
        uvec4 xa[MAX_COLS], xb[MAX_COLS];
        vec2 ds[MAX_COLS], sx[MAX_COLS];   // sx: each half's sum of qx (its dot with bytes of 1)
        for (uint t = 0u; t < MAX_COLS; ++t)
            if (t < pc.T) {
                const uint blk = t * blocks + b;
                xa[t] = xq[2u * blk];
                xb[t] = xq[2u * blk + 1u];
                ds[t] = xd[pc.d_base + blk];
                sx[t] = vec2(0.0);
#ifdef I8_MIN_PER_16
                sx[t] = vec2((sdot4(ONES, xa[t].x, 0) + sdot4(ONES, xa[t].y, 0)) + (sdot4(ONES, xa[t].z, 0) + sdot4(ONES, xa[t].w, 0)),
                             (sdot4(ONES, xb[t].x, 0) + sdot4(ONES, xb[t].y, 0)) + (sdot4(ONES, xb[t].z, 0) + sdot4(ONES, xb[t].w, 0)));
#endif
            }
        for (uint r = 0u; r < NUM_ROWS; ++r) {
            if (row0 + r < pc.N) {
                uint q[8];
                vec2 dw;
                I8_MIN_T mw;
                decode_block_i8((row0 + r) * pc.row_bytes, b, q, dw, mw);
                for (uint t = 0u; t < MAX_COLS; ++t)
                    if (t < pc.T) {
                        const int lo = (sdot4(q[0], xa[t].x, 0) + sdot4(q[1], xa[t].y, 0)) +
                                       (sdot4(q[2], xa[t].z, 0) + sdot4(q[3], xa[t].w, 0));
                        const int hi = (sdot4(q[4], xb[t].x, 0) + sdot4(q[5], xb[t].y, 0)) +
                                       (sdot4(q[6], xb[t].z, 0) + sdot4(q[7], xb[t].w, 0));
                        precise float v = seg[r][t] + block_sum_i8(lo, hi, dw, mw, ds[t], sx[t]);
                        seg[r][t] = v;
                    }
            }
        }
    }
    store_row_sums(row0, blocks, seg);
}
