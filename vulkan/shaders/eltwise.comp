#version 450
// eltwise.comp — the element-wise ops of the forward: out = a + b (b repeats every b_len
// elements: a bias or a residual of the same size), out = a * s, and the gated units
// out = silu(a) * b, out = gelu_tanh(a) * b.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer Out { float outv[]; };

#define OP_ADD 0
#define OP_SCALE 1
#define OP_SWIGLU 2
#define OP_GEGLU 3

layout(push_constant) uniform Push {
    uint n;       // elements
    uint op;
    uint b_len;   // OP_ADD: b is indexed i % b_len
    float s;      // OP_SCALE
} pc;

// The CPU evaluates GELU on the argument rounded to f16 and rounds the result to f16 (ggml's
// table); doing the same keeps the two within float rounding of each other.
float round_f16(float x) { return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x; }

float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876;
    const float coef_a = 0.044715;
    return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * x * (1.0 + coef_a * x * x)));
}

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= pc.n) return;
    const float x = a[i];
    float y;
    if (pc.op == OP_ADD) {
        y = x + b[i % pc.b_len];
    } else if (pc.op == OP_SCALE) {
        y = x * pc.s;
    } else if (pc.op == OP_SWIGLU) {
        y = x / (1.0 + exp(-x)) * b[i];
    } else {
        if (x <= -10.0) y = 0.0;
        else if (x >= 10.0) y = x * b[i];
        else y = round_f16(gelu_tanh(round_f16(x))) * b[i];
    }
    outv[i] = y;
}
