// rope.h — RoPE's angles as llama.cpp computes them (ggml_rope_ext): per-pair frequency factors
// (Llama 3's "llama3" type, the rope_freqs.weight tensor), linear interpolation (freq_scale =
// 1/factor) and YaRN (a ramp between interpolated and extrapolated angles over the pairs, and a
// magnitude factor on cos and sin). Shared by the CPU table (ops.cpp rope_table) and the CUDA
// kernel (cuda/ops.cu), so both compute the same floats in the same order.
//
// Unscaled RoPE is the special case freq_scale = 1, ext_factor = 0, attn_factor = 1, no factors:
// every step below is then an exact identity (x / 1, 1 * x, cos * 1), so the angles are bit for
// bit those of plain pos * base^(-i0/n_dims).
#pragma once
#include <math.h>
#include "common/blocks.h"   // LLL_HD

namespace lll {

// A layer's RoPE scaling, as read from the GGUF (models/layer_blocks.cpp load_rope_scaling).
struct RopeScaling {
    float freq_scale = 1.0f;    // linear and YaRN: 1 / rope.scaling.factor
    float ext_factor = 0.0f;    // YaRN: 1 (how much of the extrapolated angle the ramp lets in)
    float attn_factor = 1.0f;   // multiplies cos and sin (YaRN's mscale, llama.cpp's context value)
    int n_ctx_orig = 0;         // YaRN: the context the model was trained at
    float beta_fast = 32.0f, beta_slow = 1.0f;   // YaRN: the ramp's ends, in rotations
};

// The angles of one rope call: a base, its scaling, and per-pair frequency factors
// (rope_freqs.weight: [rope_dims/2] divisors of each pair's angle; null when the file has none).
struct RopeFreqs {
    float base = 10000.0f;
    RopeScaling scaling;
    const float* freq_factors = nullptr;   // host memory (a GPU backend keeps its own copy)
    bool same_as(const RopeFreqs& o) const {
        return base == o.base && freq_factors == o.freq_factors && scaling.freq_scale == o.scaling.freq_scale &&
               scaling.ext_factor == o.scaling.ext_factor && scaling.attn_factor == o.scaling.attn_factor &&
               scaling.n_ctx_orig == o.scaling.n_ctx_orig && scaling.beta_fast == o.scaling.beta_fast &&
               scaling.beta_slow == o.scaling.beta_slow;
    }
};

// The pair index (fractional) whose wavelength turns n_rot times over n_ctx_orig positions:
// ggml_rope_yarn_corr_dim.
LLL_HD inline float rope_yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * 3.14159265358979323846f)) / (2 * logf(base));
}

// YaRN's ramp runs between these pair indices (ggml_rope_yarn_corr_dims).
LLL_HD inline void rope_yarn_corr_dims(int n_dims, float base, const RopeScaling& s, float dims[2]) {
    const float start = floorf(rope_yarn_corr_dim(n_dims, s.n_ctx_orig, s.beta_fast, base));
    const float end = ceilf(rope_yarn_corr_dim(n_dims, s.n_ctx_orig, s.beta_slow, base));
    dims[0] = start > 0 ? start : 0;
    dims[1] = end < n_dims - 1 ? end : (float)(n_dims - 1);
}

// (cos, sin) of pair i0/2 whose unscaled angle is theta_extrap (pos * base^(-i0/n_dims), already
// divided by the pair's frequency factor): ggml's rope_yarn.
LLL_HD inline void rope_yarn(float theta_extrap, int i0, const RopeScaling& s, const float corr[2], float* c,
                             float* sn) {
    const float theta_interp = s.freq_scale * theta_extrap;
    float theta = theta_interp;
    float mscale = s.attn_factor;
    if (s.ext_factor != 0.0f) {
        const float span = corr[1] - corr[0] > 0.001f ? corr[1] - corr[0] : 0.001f;
        const float y = (i0 / 2 - corr[0]) / span;
        const float ramp = 1 - (y < 0 ? 0 : (y > 1 ? 1 : y));
        const float ramp_mix = ramp * s.ext_factor;
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / s.freq_scale);
    }
    *c = cosf(theta) * mscale;
    *sn = sinf(theta) * mscale;
}

// One token's table row cs[rope_dims] = (cos, sin) per pair: theta = pos, multiplied by
// base^(-2/n_dims) after each pair in f32 as ggml's rope cache does; freq_factors[rope_dims/2]
// (may be null) divide each pair's angle.
LLL_HD inline void rope_table_row(float pos, int rope_dims, float theta_scale, const RopeScaling& s,
                                  const float corr[2], const float* freq_factors, float* cs) {
    float theta = pos;
    for (int i0 = 0; i0 < rope_dims; i0 += 2) {
        const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
        rope_yarn(theta / ff, i0, s, corr, &cs[i0], &cs[i0 + 1]);
        theta *= theta_scale;
    }
}

}  // namespace lll
