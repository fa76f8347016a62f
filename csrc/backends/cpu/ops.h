// ops.h — the element-wise and row-wise operations of the forward pass, computed as ggml's CPU
// backend computes them (same accumulation precision, same rounding points), so our logits
// track llama.cpp's on the same file.
#pragma once
#include <stdint.h>
#include <functional>
#include "model/model.h"
#include "common/rope.h"
#include "common/threadpool.h"

namespace lll {

// Calls fn(r0, r1) over [0, rows) split into contiguous ranges across the pool, or inline when
// rows * cost_per_row is too small to be worth waking the workers (decode steps).
void parallel_rows(ThreadPool& pool, int64_t rows, int64_t cost_per_row,
                   const std::function<void(int64_t r0, int64_t r1)>& fn);

// y[n] = x / sqrt(mean(x^2) + eps) * w  (w may be null). Sum of squares in double, as ggml.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// The scalar loop rms_norm's SIMD path is held to (tests).
void rms_norm_reference(const float* x, const float* w, float* y, int64_t n, float eps);
// rms_norm on each of `rows` rows of n (in place allowed), rows split across the pool.
void rms_norm_rows(ThreadPool& pool, const float* x, const float* w, float* y, int64_t rows, int64_t n,
                   float eps);

// Rotary embedding, in place, on x[T, n_heads, head_dim]: rotates the first rope_dims of each
// head by the angles of rope_table, cs[T][rope_dims] ((cos, sin) per pair), made as ggml's rope
// cache makes them (rope.h: theta_i = pos * base^(-2i/rope_dims) by repeated f32 multiplication,
// then the frequency factors, linear or YaRN scaling). One table serves q and k and every layer
// with the same frequencies (a forward's positions are the same in all of them).
void rope_table(const int32_t* positions, int64_t T, int rope_dims, const RopeFreqs& f, float* cs);
void rope(ThreadPool& pool, float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const float* cs,
          RopeStyle style);

// out[i] = silu(gate[i]) * up[i], silu through exp_approx.h's exp
void swiglu(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n);
// The scalar loop swiglu's SIMD path is held to (tests).
void swiglu_reference(const float* gate, const float* up, float* out, int64_t n);
// out[i] = gelu_tanh(gate[i]) * up[i], through an f16 table of GELU as ggml does (GGML_GELU_FP16).
void geglu(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n);
// The scalar loop geglu's SIMD path is held to (tests).
void geglu_reference(const float* gate, const float* up, float* out, int64_t n);

// LayerNorm of each row (in place allowed): mean and variance summed in double, as ggml's norm;
// then * w + b (either may be null).
void layer_norm_rows(ThreadPool& pool, const float* x, const float* w, const float* b, float* y, int64_t rows,
                     int64_t n, float eps);
// x[i] = 0.5 x (1 + erf(x / sqrt 2)): the GELU BERT models were trained with (not the tanh form).
void gelu_erf(ThreadPool& pool, float* x, int64_t n);
void gelu_erf_reference(float* x, int64_t n);   // the scalar loop gelu_erf's SIMD path matches bit for bit

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// rows[r][i] += bias[i]
void add_bias_rows(float* rows, const float* bias, int64_t n_rows, int64_t n);
void scale_inplace(float* y, float s, int64_t n);

// Token embedding rows: out[T, n_embd] = dequant(tok_embd[tokens[t]]).
void embed_tokens(const WeightRef& tok_embd, const int32_t* tokens, int64_t T, float* out);

}  // namespace lll
