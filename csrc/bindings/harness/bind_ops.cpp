// bind_ops.cpp — the CPU backend's layer ops one at a time, each beside its scalar reference:
// RMSNorm, the gated activations, attention over a fresh paged KV cache (tests/test_attention.py,
// test_kernels.py, test_llamacpp_numerics.py).
#include "bindings/harness/harness.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/ops.h"
#include "backends/registry.h"
#include "model/kv_cache.h"

namespace py = pybind11;
using lll::GGMLType;
using lll::Isa;
using namespace lll::harness;

namespace {

// A gated activation (act(gate) * up) through the model's path (SIMD where compiled) or its
// scalar reference.
using GluFn = void (*)(lll::ThreadPool&, const float*, const float*, float*, int64_t);
using GluRefFn = void (*)(const float*, const float*, float*, int64_t);
py::array_t<float> glu_py(GluFn fast, GluRefFn ref, const char* name, const F32Array& gate,
                          const F32Array& up, bool reference) {
    if (gate.size() != up.size()) throw std::invalid_argument(std::string(name) + ": gate and up differ in size");
    py::array_t<float> out(gate.size());
    float* o = out.mutable_data();
    if (reference) ref(gate.data(), up.data(), o, gate.size());
    else {
        SharedPool& sp = shared_pool(2);
        std::lock_guard<std::mutex> lock(sp.busy);
        fast(sp.pool, gate.data(), up.data(), o, gate.size());
    }
    return out;
}

// Attention test harness: a one-layer KVCache of n_blocks blocks of block_size slots gets K/V of
// every token (k, v: [T, n_head_kv, head_dim] at positions[T] of sequences seq_of_token[T] through
// block_tables[n_seqs, max_blocks]); then attention runs for the tokens `query_rows` only (all
// tokens of a sequence, or just its last ones: decode) with their q rows, at their positions or at
// query_positions[Tq] where given (an encoder's rows all at the last one). Returns [Tq, n_head, hd].
py::array_t<float> attention_test_py(const F32Array& q, const F32Array& k, const F32Array& v,
                                     const I32Array& positions, const I32Array& seq_of_token,
                                     const I32Array& block_tables, int64_t n_blocks, int block_size,
                                     const I32Array& query_rows, float scale, int window, int kernel,
                                     int n_threads, const std::string& numerics, float softcap,
                                     const std::string& cache_type_k, const std::string& cache_type_v,
                                     const std::optional<I32Array>& query_positions) {
    if (numerics != "fast" && numerics != "llama.cpp")
        throw std::invalid_argument("attention_test: numerics must be 'fast' or 'llama.cpp'");
    if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3)
        throw std::invalid_argument("attention_test: q, k, v must be 3-D [T, heads, head_dim]");
    const int64_t T = q.shape(0), n_head = q.shape(1), n_head_kv = k.shape(1), hd = q.shape(2);
    if (k.shape(0) != T || v.shape(0) != T || v.shape(1) != n_head_kv || k.shape(2) != hd || v.shape(2) != hd)
        throw std::invalid_argument("attention_test: k and v must both be [T, n_head_kv, head_dim] like q");
    if (positions.ndim() != 1 || positions.shape(0) != T || seq_of_token.ndim() != 1 || seq_of_token.shape(0) != T)
        throw std::invalid_argument("attention_test: positions and seq_of_token must be [T]");
    if (block_tables.ndim() != 2) throw std::invalid_argument("attention_test: block_tables must be [n_seqs, max_blocks]");
    if (kernel < -1 || kernel > 2) throw std::invalid_argument("attention_test: kernel must be -1 (auto), 0 (scalar), 1 (AVX2) or 2 (AVX-512)");
    const int64_t n_seqs = block_tables.shape(0), max_blocks = block_tables.shape(1);
    SharedPool& sp = shared_pool(n_threads);
    const lll::BackendConfig cfg{nullptr, &sp.pool, lll::best_isa(), lll::Numerics::Fast, lll::kHostPlacement};
    const std::unique_ptr<lll::Backend> host = lll::make_backend(lll::kHostPlacement, cfg);   // KV memory only
    const lll::KVTypes types{lll::parse_cache_type(cache_type_k), lll::parse_cache_type(cache_type_v)};
    lll::KVCache kv({host.get()}, n_blocks, block_size, (int)n_head_kv, (int)hd, types);
    for (int64_t t = 0; t < T; ++t) {   // kv_write trusts its batch: check what it will index
        const int32_t s = seq_of_token.at(t), p = positions.at(t);
        if (s < 0 || s >= n_seqs || p < 0 || p / block_size >= max_blocks)
            throw std::invalid_argument("attention_test: token " + std::to_string(t) + " has a bad sequence or position");
        const int32_t blk = block_tables.at(s, p / block_size);
        if (blk < 0 || blk >= n_blocks) throw std::invalid_argument("attention_test: block id out of range");
    }
    lll::Batch all;
    all.positions = positions.data(), all.seq_of_token = seq_of_token.data(), all.n_tokens = T;
    all.block_tables = block_tables.data(), all.n_seqs = n_seqs, all.max_blocks = max_blocks;
    lll::kv_write(kv, 0, k.data(), v.data(), all);
    const int64_t Tq = query_rows.size();
    if (query_positions && query_positions->size() != Tq)
        throw std::invalid_argument("attention_test: query_positions must have one position per query row");
    std::vector<int32_t> qpos(Tq), qseq(Tq);
    std::vector<float> qsub(Tq * n_head * hd);
    for (int64_t i = 0; i < Tq; ++i) {
        const int32_t t = query_rows.data()[i];
        if (t < 0 || t >= T) throw std::invalid_argument("attention_test: query row out of range");
        qpos[i] = query_positions ? query_positions->data()[i] : positions.at(t), qseq[i] = seq_of_token.at(t);
        memcpy(&qsub[i * n_head * hd], q.data() + t * n_head * hd, n_head * hd * sizeof(float));
    }
    lll::Batch qb = all;
    qb.positions = qpos.data(), qb.seq_of_token = qseq.data(), qb.n_tokens = Tq;
    py::array_t<float> out({Tq, n_head, hd});
    float* op = out.mutable_data();
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(sp.busy);
    if (numerics == "llama.cpp")
        lll::attention_ggml(sp.pool, kv, 0, qsub.data(), op, qb, (int)n_head, (int)n_head_kv, (int)hd, scale, window,
                            softcap, static_cast<lll::AttnKernel>(kernel));
    else
        lll::attention(sp.pool, kv, 0, qsub.data(), op, qb, (int)n_head, (int)n_head_kv, (int)hd, scale, window,
                       softcap, static_cast<lll::AttnKernel>(kernel));
    return out;
}

}  // namespace

void register_ops_harness(py::module_& m) {
    m.def("rms_norm", [](const F32Array& x, const F32Array& w, float eps, bool reference) {
              if (x.size() != w.size()) throw std::invalid_argument("rms_norm: x and w differ in size");
              py::array_t<float> y(x.size());
              (reference ? lll::rms_norm_reference : lll::rms_norm)(x.data(), w.data(), y.mutable_data(), x.size(), eps);
              return y;
          }, py::arg("x"), py::arg("w"), py::arg("eps"), py::arg("reference") = false,
          "x / sqrt(mean(x^2) + eps) * w as the model computes it, or through the scalar reference.");
    m.def("swiglu", [](const F32Array& g, const F32Array& u, bool reference) {
              return glu_py(lll::swiglu, lll::swiglu_reference, "swiglu", g, u, reference);
          }, py::arg("gate"), py::arg("up"), py::arg("reference") = false,
          "silu(gate) * up as the model computes it, or through the scalar reference.");
    m.def("geglu", [](const F32Array& g, const F32Array& u, bool reference) {
              return glu_py(lll::geglu, lll::geglu_reference, "geglu", g, u, reference);
          }, py::arg("gate"), py::arg("up"), py::arg("reference") = false,
          "gelu(gate) * up as the model computes it (F16 GELU table), or through the scalar reference.");
    m.def("gelu_erf", [](const F32Array& x, bool reference) {
              py::array_t<float> y(x.size());
              float* o = y.mutable_data();
              std::copy(x.data(), x.data() + x.size(), o);
              if (reference) lll::gelu_erf_reference(o, x.size());
              else {
                  SharedPool& sp = shared_pool(2);
                  std::lock_guard<std::mutex> lock(sp.busy);
                  lll::gelu_erf(sp.pool, o, x.size());
              }
              return y;
          }, py::arg("x"), py::arg("reference") = false,
          "x * Phi(x) (erf GELU of the encoders' FFN) as the model computes it, or through the scalar loop.");
    m.def("attention_test", &attention_test_py, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("positions"),
          py::arg("seq_of_token"), py::arg("block_tables"), py::arg("n_blocks"), py::arg("block_size"),
          py::arg("query_rows"), py::arg("scale"), py::arg("window") = 0, py::arg("kernel") = -1,
          py::arg("n_threads") = 2, py::arg("numerics") = "fast", py::arg("softcap") = 0.0f,
          py::arg("cache_type_k") = "f16", py::arg("cache_type_v") = "f16", py::arg("query_positions") = py::none(),
          "Test harness: writes K/V of all tokens to a fresh paged cache (of types cache_type_k / "
          "cache_type_v: f16, q8_0, q4_0), runs attention for query_rows (at query_positions where given); "
          "kernel -1 auto, 0 scalar, 1 avx2, 2 avx512; softcap > 0 soft-caps the scores; numerics 'fast' or 'llama.cpp' (whose kernel order "
          "depends on len(query_rows): one row or more). Returns [len(query_rows), n_head, head_dim].");
    m.def("attention_exp", [](const F32Array& x) {
        // Defined for x <= 0 only (softmax subtracts the maximum first): a positive x would
        // scale by 2^n past the float exponent (UBSan: float -> int overflow in the scalar form).
        for (py::ssize_t i = 0; i < x.size(); ++i)
            if (x.data()[i] > 0.0f)
                throw py::value_error("attention_exp: x[" + std::to_string(i) + "] = " + std::to_string(x.data()[i]) +
                                      " is positive; it is defined for x <= 0");
        py::array_t<float> y(x.size());
        for (py::ssize_t i = 0; i < x.size(); ++i) y.mutable_data()[i] = lll::attention_exp(x.data()[i]);
        return y;
    }, py::arg("x"), "The softmax exp of attention (scalar reference of the SIMD one), elementwise on a 1-D array of x <= 0.");
    m.def("attention_avx512_available", &lll::attention_avx512_available,
          "Whether the AVX-512 attention kernel is compiled in and supported here.");
    m.def("attention_avx2_available", &lll::attention_avx2_available,
          "Whether the AVX2 attention kernel is compiled in and this CPU runs it.");
}
