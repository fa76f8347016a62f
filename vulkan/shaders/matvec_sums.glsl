// matvec_sums.glsl — the matrix-vector kernels' sums, in the order the tiled kernels add theirs, so
// a token's outputs are the same bits whichever kernel (hence whatever batch) computed them. The
// row's 32-element blocks fall in segments of pc.seg_blocks consecutive blocks (the host makes
// that ceil(blocks / workgroup size), so each invocation owns one segment); then
//     segment sum  s_j = (...((0 + c_b) + c_b+1) + ...)  over the segment's blocks in order,
//     output       y   = (...((0 + s_0) + s_1) + ...)    over the segments in order,
// c_b the block's sum (block_dot.glsl's chain / block_sum_i8, shared with the tiled kernels). The
// segment sums meet in shared memory and the invocation that owns an output adds them in order.
// Every sum is `precise`: no contraction into FMAs the other kernel might not make.
#define MAX_GROUP 64u   // largest workgroup (the host clamps the subgroup size to 8..64)

shared float seg_sums[NUM_ROWS * MAX_COLS][MAX_GROUP];

// This invocation's segment: blocks [segment_begin(), segment_end(blocks)).
uint segment_begin() { return gl_LocalInvocationID.x * pc.seg_blocks; }
uint segment_end(uint blocks) { return min(blocks, (gl_LocalInvocationID.x + 1u) * pc.seg_blocks); }

// s[r][t] is this invocation's segment sum (zeros past the last block); the outputs go to
// y[t * ldy + y0 + row].
void store_row_sums(uint row0, uint blocks, float s[NUM_ROWS][MAX_COLS]) {
    const uint segments = (blocks + pc.seg_blocks - 1u) / pc.seg_blocks;
    for (uint r = 0u; r < NUM_ROWS; ++r)
        for (uint t = 0u; t < MAX_COLS; ++t)
            if (t < pc.T) seg_sums[r * MAX_COLS + t][gl_LocalInvocationID.x] = s[r][t];
    barrier();
    for (uint o = gl_LocalInvocationID.x; o < NUM_ROWS * MAX_COLS; o += gl_WorkGroupSize.x) {
        const uint r = o / MAX_COLS, t = o % MAX_COLS;
        if (row0 + r >= pc.N || t >= pc.T) continue;
        precise float sum = 0.0;
        for (uint i = 0u; i < segments; ++i) sum += seg_sums[o][i];
        y[t * pc.ldy + pc.y0 + row0 + r] = sum;
    }
}
