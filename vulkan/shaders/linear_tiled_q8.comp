#version 450
// linear_tiled_q8.comp — y[T, N] = x[T, K] . W[N, K]^T for many tokens (prompts) with integer dot
// products: x comes quantized to q8_1 by quantize_q8_1.comp. 64 x 64 output tiles as in
// linear_tiled.comp, K walked one 32-element block at a time through shared memory: 64 of the 256
// invocations unpack one weight row's block to packed int8 (blocks_i8.glsl) with its factors, 64
// copy one token's q8_1 block; then each multiplies a 4 x 4 block of outputs with OpSDot, rows and
// tokens strided by 16. Each block's sum (block_sum_i8) is added in matvec_sums.glsl's order
// (segments, then their sums), as linear_matvec_q8.comp adds them, so a token's outputs are the same bits through either kernel.
#include "common.glsl"

layout(local_size_x = 256) in;

#define BM 64u    // weight rows (N) per tile
#define BN 64u    // tokens (T) per tile
#define WORDS 9u  // 8 words of packed int8 per block, plus 1 so a column of rows spans the banks

layout(binding = 0) readonly buffer W { uint wdata[]; };
layout(binding = 1) readonly buffer XQ { uvec4 xq[]; };   // quantize_q8_1.comp's words, 2 per block
layout(binding = 1) readonly buffer XD { vec2 xd[]; };    // its (d, s), from d_base
layout(binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint N, K, T;   // K a multiple of 32
    uint row_bytes;
    uint tiles_n;   // ceil(N / BM): the flat group id is tile_n + tiles_n * tile_t
    uint ldy, y0;   // y row t, column n is y[t * ldy + y0 + n]
    uint seg_blocks;   // blocks per segment, as the matrix-vector kernel's (matvec_sums.glsl)
    uint d_base;
} pc;

#include "sdot.glsl"

#include "blocks.glsl"
#include "blocks_i8.glsl"

#define MIN_T I8_MIN_T

shared uint wq[BM * WORDS];
shared vec2 wd[BM];       // the block's dw
shared MIN_T wm[BM];      // and mw
shared uint xs[BN * WORDS];
shared vec2 xds[BN];      // the token's (d, s)
shared vec2 xsum[BN];     // each half's sum of qx, for the mins per 16 (zeros for the other types)

void load_block(uint n0, uint t0, uint b, uint blocks) {
    const uint lid = gl_LocalInvocationID.x;
    if (lid < BM) {
        uint q[8];
        vec2 dw = vec2(0.0);
        MIN_T mw = MIN_T(0.0);
        if (n0 + lid < pc.N) decode_block_i8((n0 + lid) * pc.row_bytes, b, q, dw, mw);
        else for (uint i = 0u; i < 8u; ++i) q[i] = 0u;
        for (uint i = 0u; i < 8u; ++i) wq[lid * WORDS + i] = q[i];
        wd[lid] = dw;
        wm[lid] = mw;
    } else if (lid < BM + BN) {
        const uint t = lid - BM;
        uvec4 a = uvec4(0u), c = uvec4(0u);
        vec2 ds = vec2(0.0);
        if (t0 + t < pc.T) {
            const uint blk = (t0 + t) * blocks + b;
            a = xq[2u * blk];
            c = xq[2u * blk + 1u];
            ds = xd[pc.d_base + blk];
        }
        for (uint i = 0u; i < 4u; ++i) {
            xs[t * WORDS + i] = a[i];
            xs[t * WORDS + 4u + i] = c[i];
        }
        xds[t] = ds;
        xsum[t] = vec2(0.0);
#ifdef I8_MIN_PER_16
        xsum[t] = vec2((sdot4(ONES, a.x, 0) + sdot4(ONES, a.y, 0)) + (sdot4(ONES, a.z, 0) + sdot4(ONES, a.w, 0)),
                       (sdot4(ONES, c.x, 0) + sdot4(ONES, c.y, 0)) + (sdot4(ONES, c.z, 0) + sdot4(ONES, c.w, 0)));
#endif
    }
}

void main() {
    const uint g = flat_group_id();
    const uint n0 = (g % pc.tiles_n) * BM, t0 = (g / pc.tiles_n) * BN;
    const uint tx = gl_LocalInvocationID.x % 16u, ty = gl_LocalInvocationID.x / 16u;
    const uint blocks = pc.K / 32u;
    precise float acc[4][4], seg[4][4];   // the output and its running segment (matvec_sums.glsl)
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = seg[i][j] = 0.0;

    for (uint b = 0u; b < blocks; ++b) {
        load_block(n0, t0, b, blocks);
        barrier();
        for (uint i = 0u; i < 4u; ++i) {
            const uint r = tx + 16u * i;
            uint q[8];
            for (uint k = 0u; k < 8u; ++k) q[k] = wq[r * WORDS + k];
            const vec2 dw = wd[r];
            const MIN_T mw = wm[r];
            for (uint j = 0u; j < 4u; ++j) {
                const uint t = ty + 16u * j;
                const int lo = (sdot4(q[0], xs[t * WORDS], 0) + sdot4(q[1], xs[t * WORDS + 1u], 0)) +
                               (sdot4(q[2], xs[t * WORDS + 2u], 0) + sdot4(q[3], xs[t * WORDS + 3u], 0));
                const int hi = (sdot4(q[4], xs[t * WORDS + 4u], 0) + sdot4(q[5], xs[t * WORDS + 5u], 0)) +
                               (sdot4(q[6], xs[t * WORDS + 6u], 0) + sdot4(q[7], xs[t * WORDS + 7u], 0));
                seg[i][j] = seg[i][j] + block_sum_i8(lo, hi, dw, mw, xds[t], xsum[t]);
            }
        }
        if ((b + 1u) % pc.seg_blocks == 0u || b + 1u == blocks)
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j) {
                    acc[i][j] = acc[i][j] + seg[i][j];
                    seg[i][j] = 0.0;
                }
        barrier();
    }
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) {
            const uint n = n0 + tx + 16u * i, t = t0 + ty + 16u * j;
            if (n < pc.N && t < pc.T) y[t * pc.ldy + pc.y0 + n] = acc[i][j];
        }
}
