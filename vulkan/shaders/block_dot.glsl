// block_dot.glsl — the sum over one 32-element block of weights times activations, in the one
// order every float linear kernel uses (matvec_sums.glsl: batch invariance): a `precise` FMA chain
// from 0 over the elements in order. The matrix-vector kernel runs it 16 elements at a time
// (chain16 from 0, then on from the first half's sum); the tiled kernel inlines the same chain.
float chain16(float w[16], vec4 xv[4], float s0) {
    precise float s = s0;
    for (uint k = 0u; k < 16u; ++k) s = fma(w[k], xv[k >> 2][k & 3u], s);
    return s;
}
