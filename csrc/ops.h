// ops.h — the element-wise and row-wise operations of the forward pass, computed as ggml's CPU
// backend computes them (same accumulation precision, same rounding points), so our logits
// track llama.cpp's on the same file.
#pragma once
#include <stdint.h>
#include "model.h"
#include "threadpool.h"

namespace lll {

// y[n] = x / sqrt(mean(x^2) + eps) * w  (w may be null). Sum of squares in double, as ggml.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// rms_norm on each of `rows` rows of n (in place allowed).
void rms_norm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps);

// Rotary embedding, in place, on x[T, n_heads, head_dim] at positions[T]; rotates the first
// rope_dims of each head. theta_i = pos * base^(-2i/rope_dims) built by repeated multiplication
// in f32, as ggml's rope cache does.
void rope(float* x, int64_t T, int n_heads, int head_dim, const int32_t* positions, int rope_dims,
          float base, RopeStyle style);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out[i] = gelu_tanh(gate[i]) * up[i], through an f16 table of GELU as ggml does (GGML_GELU_FP16).
void geglu(const float* gate, const float* up, float* out, int64_t n);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// rows[r][i] += bias[i]
void add_bias_rows(float* rows, const float* bias, int64_t n_rows, int64_t n);
void scale_inplace(float* y, float s, int64_t n);

// Token embedding rows: out[T, n_embd] = dequant(tok_embd[tokens[t]]).
void embed_tokens(const WeightRef& tok_embd, const int32_t* tokens, int64_t T, float* out);

}  // namespace lll
