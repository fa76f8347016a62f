#version 450
// linear_tiled.comp — y[T, N] = x[T, K] . W[N, K]^T for many tokens (prompts): 64 x 64 output
// tiles, K walked 32 at a time through shared memory. Half of the 256 invocations dequantize
// the weight tile (one 16-element chunk each), the other half load the activation tile; then
// each computes a 4 x 4 block of outputs from shared memory, rows and tokens strided by 16 so
// neighbouring invocations touch neighbouring shared-memory banks. Each step's 32 products are
// summed on their own (block_dot.glsl's chain) and the step sums added in matvec_sums.glsl's
// order (segments, then their sums), as linear_matvec.comp adds its block sums, so a token's outputs are the same bits through either.
#include "common.glsl"

layout(local_size_x = 256) in;

#define BM 64u    // weight rows (N) per tile
#define BN 64u    // tokens (T) per tile
#define BK 32u
#define PAD 1u    // row stride 33: column reads hit distinct banks

layout(binding = 0) readonly buffer W { uint wdata[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint N, K, T;
    uint row_bytes;
    uint tiles_n;   // ceil(N / BM): the flat group id is tile_n + tiles_n * tile_t
    uint ldy, y0;   // y row t, column n is y[t * ldy + y0 + n] (a row window's columns of a wider y)
    uint seg_blocks;   // blocks per segment, as the matrix-vector kernel's (matvec_sums.glsl)
} pc;

#include "blocks.glsl"
#include "block_dot.glsl"

shared float ws[BM][BK + PAD];
shared float xs[BN][BK + PAD];

void load_tiles(uint n0, uint t0, uint k0) {
    const uint lid = gl_LocalInvocationID.x;
    const uint r = (lid & 127u) >> 1, half_ = lid & 1u;
    if (lid < 128u) {
        float w[16];
        if (n0 + r < pc.N) decode_chunk16((n0 + r) * pc.row_bytes, k0 / 16u + half_, pc.K, w);
        else for (uint j = 0u; j < 16u; ++j) w[j] = 0.0;
        for (uint j = 0u; j < 16u; ++j) ws[r][16u * half_ + j] = w[j];
    } else {
        const uint t = t0 + r;
        for (uint j = 0u; j < 16u; ++j) {
            const uint k = k0 + 16u * half_ + j;
            xs[r][16u * half_ + j] = (t < pc.T && k < pc.K) ? x[t * pc.K + k] : 0.0;
        }
    }
}

void main() {
    const uint g = flat_group_id();
    const uint n0 = (g % pc.tiles_n) * BM, t0 = (g / pc.tiles_n) * BN;
    const uint tx = gl_LocalInvocationID.x % 16u, ty = gl_LocalInvocationID.x / 16u;
    precise float acc[4][4], seg[4][4];   // the output and its running segment (matvec_sums.glsl)
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = seg[i][j] = 0.0;

    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        load_tiles(n0, t0, k0);
        barrier();
        // block_dot.glsl's chain, unrolled over the 4 x 4 outputs: a precise FMA chain from 0 over k
        precise float c[4][4];
        for (uint i = 0u; i < 4u; ++i)
            for (uint j = 0u; j < 4u; ++j) c[i][j] = 0.0;
        for (uint k = 0u; k < BK; ++k) {
            float a[4], b[4];
            for (uint i = 0u; i < 4u; ++i) a[i] = ws[tx + 16u * i][k];
            for (uint j = 0u; j < 4u; ++j) b[j] = xs[ty + 16u * j][k];
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j) c[i][j] = fma(a[i], b[j], c[i][j]);
        }
        const uint b = k0 / BK;
        const bool seg_end = (b + 1u) % pc.seg_blocks == 0u || k0 + BK >= pc.K;
        for (uint i = 0u; i < 4u; ++i)
            for (uint j = 0u; j < 4u; ++j) {
                seg[i][j] = seg[i][j] + c[i][j];
                if (seg_end) {
                    acc[i][j] = acc[i][j] + seg[i][j];
                    seg[i][j] = 0.0;
                }
            }
        barrier();
    }
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) {
            const uint n = n0 + tx + 16u * i, t = t0 + ty + 16u * j;
            if (n < pc.N && t < pc.T) y[t * pc.ldy + pc.y0 + n] = acc[i][j];
        }
}
