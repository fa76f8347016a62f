// matvec_sums.glsl — the end of the matrix-vector kernels: each invocation's partial sums of
// NUM_ROWS rows x MAX_COLS tokens meet by subgroupAdd, and across subgroups in shared memory when
// a driver splits the workgroup into several; the sums go to y[t * ldy + y0 + row].
#define MAX_SUBGROUPS 16u          // largest workgroup (64) / smallest subgroup (4)

shared float partial[NUM_ROWS * MAX_COLS][MAX_SUBGROUPS];

void store_row_sums(uint row0, float acc[NUM_ROWS][MAX_COLS]) {
    if (gl_NumSubgroups == 1u) {   // uniform
        for (uint r = 0u; r < NUM_ROWS; ++r)
            for (uint t = 0u; t < MAX_COLS; ++t) {
                const float s = subgroupAdd(acc[r][t]);
                if (subgroupElect() && row0 + r < pc.N && t < pc.T) y[t * pc.ldy + pc.y0 + row0 + r] = s;
            }
        return;
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
            y[t * pc.ldy + pc.y0 + row0 + r] = s;
        }
    }
}
