// layer_blocks.cpp — see layer_blocks.h.
#include "layer_blocks.h"
#include <math.h>
#include <initializer_list>
#include <stdexcept>
#include "../attention.h"
#include "../matmul.h"
#include "../quants/ggml_order.h"
#include "../ops.h"

namespace lll {

namespace {
struct LinearOut {
    const WeightRef* w;
    float* y;                 // [T, w->ne1]
    const WeightRef* bias;    // or null
};
}  // namespace

// y = x . w^T with x already quantized to w's activation type.
static void linear_quantized(Model& m, const WeightRef& w, const void* xq, int64_t T, float* y,
                             const WeightRef* bias) {
    if (w.repacked) matmul_q_repacked(m.pool(), w.type, w.data, w.ne1, w.ne0, xq, T, y, w.ne1);
    else if (m.llamacpp_kernel(w)) ggml_order::matmul_legacy(m.pool(), w.type, w.data, w.ne1, w.ne0, xq, T, y, w.ne1);
    else matmul_q(m.pool(), w.type, w.data, w.ne1, w.ne0, xq, T, y, w.ne1, m.isa());
    if (bias && bias->present()) add_bias_rows(y, bias->f32(), T, w.ne1);
}

// Repacked matrices waiting to run on the quantized x in m.s.xq (a fixed array: no allocation).
struct PendingGroup {
    static constexpr int kMax = 4;
    const LinearOut* out[kMax];
    int n = 0;
};

// The repacked matrices collected for one quantized x, as one matmul_q_repacked_group.
static void flush_group(Model& m, PendingGroup& group, int64_t T) {
    if (group.n == 0) return;
    RepackedMatmul jobs[PendingGroup::kMax];
    for (int i = 0; i < group.n; ++i) {
        const WeightRef& w = *group.out[i]->w;
        jobs[i] = {w.type, w.data, w.ne1, group.out[i]->y, w.ne1};
    }
    matmul_q_repacked_group(m.pool(), jobs, group.n, group.out[0]->w->ne0, m.s.xq.data(), T);
    for (int i = 0; i < group.n; ++i) {
        const LinearOut& o = *group.out[i];
        if (o.bias && o.bias->present()) add_bias_rows(o.y, o.bias->f32(), T, o.w->ne1);
    }
    group.n = 0;
}

// Several matrices applied to the same x (q/k/v, gate/up): x is quantized once for each run of
// matrices that share an activation type, not once per matrix, and the repacked ones of a run
// go to the pool together.
static void linear_same_input(Model& m, std::initializer_list<LinearOut> outs, const float* x, int64_t T) {
    void* xq = m.s.xq.data();
    PendingGroup group;
    bool quantized = false;
    GGMLType quantized_as = GGMLType::F32;
    for (const LinearOut& o : outs) {
        // llama.cpp numerics, K-quants: the kernel quantizes x itself (its choice depends on T).
        // Legacy types share the quantized x below, as ggml's activation rounding is the same.
        if (m.llamacpp_kernel(*o.w) && !ggml_order::legacy_supported(o.w->type)) {
            ggml_order::matmul(m.pool(), o.w->type, o.w->data, o.w->ne1, o.w->ne0, x, T, o.y, o.w->ne1);
            if (o.bias && o.bias->present()) add_bias_rows(o.y, o.bias->f32(), T, o.w->ne1);
            continue;
        }
        const GGMLType vdt = type_traits(o.w->type)->vec_dot_type;
        if (!quantized || vdt != quantized_as) {
            flush_group(m, group, T);
            quantize_activations(m.pool(), vdt, x, T, o.w->ne0, xq, m.isa());
            quantized = true;
            quantized_as = vdt;
        }
        if (!o.w->repacked) {
            linear_quantized(m, *o.w, xq, T, o.y, o.bias);
            continue;
        }
        if (group.n == PendingGroup::kMax) flush_group(m, group, T);
        group.out[group.n++] = &o;   // run together: one parallel region
    }
    flush_group(m, group, T);
}

void linear(Model& m, const WeightRef& w, const float* x, int64_t T, float* y, const WeightRef* bias) {
    linear_same_input(m, {{&w, y, bias}}, x, T);
}

void attention_block(Model& m, int il, const float* h, int64_t T, const Batch& b, float* out) {
    const HParams& hp = m.hparams();
    const LayerWeights& L = m.weights().layers[il];
    const int hd = hp.head_dim;
    float* q = m.s.q.data();                          // [T, n_head, hd]
    float* k = m.s.k.data();                          // [T, n_head_kv, hd]
    float* v = m.s.v.data();                          // [T, n_head_kv, hd]
    linear_same_input(m, {{&L.wq, q, &L.bq}, {&L.wk, k, &L.bk}, {&L.wv, v, &L.bv}}, h, T);
    if (L.q_norm.present()) rms_norm_rows(m.pool(), q, L.q_norm.f32(), q, T * hp.n_head, hd, hp.norm_eps);
    if (L.k_norm.present()) rms_norm_rows(m.pool(), k, L.k_norm.f32(), k, T * hp.n_head_kv, hd, hp.norm_eps);
    const bool swa = hp.n_swa > 0 && hp.layer_is_swa[il];
    const float base = swa ? hp.rope_base_swa : hp.rope_base;
    const float* cs = m.rope_cs(b.positions, T, base);   // [T, rope_dims]
    rope(m.pool(), q, T, hp.n_head, hd, hp.rope_dims, cs, hp.rope_style);
    rope(m.pool(), k, T, hp.n_head_kv, hd, hp.rope_dims, cs, hp.rope_style);
    if (hp.q_scale != 1.0f) scale_inplace(q, hp.q_scale, T * hp.n_head * hd);
    kv_write(m.kv(), il, k, v, b);
    float* attn = m.s.attn.data();                    // [T, n_head, hd]
    if (m.numerics() == Numerics::LlamaCpp)
        attention_ggml(m.pool(), m.kv(), il, q, attn, b, hp.n_head, hp.n_head_kv, hd, hp.attn_scale, swa ? hp.n_swa : 0);
    else
        attention(m.pool(), m.kv(), il, q, attn, b, hp.n_head, hp.n_head_kv, hd, hp.attn_scale, swa ? hp.n_swa : 0);
    linear(m, L.wo, attn, T, out);
}

void ffn_block(Model& m, int il, const float* h, int64_t T, float* out, FFNAct act) {
    const LayerWeights& L = m.weights().layers[il];
    float* gate = m.s.gate.data();                    // [T, n_ff]
    float* up = m.s.up.data();                        // [T, n_ff]
    linear_same_input(m, {{&L.w_gate, gate, nullptr}, {&L.w_up, up, nullptr}}, h, T);
    const int64_t n = T * m.hparams().n_ff;
    if (act == FFNAct::SiLU) swiglu(m.pool(), gate, up, gate, n);
    else geglu(m.pool(), gate, up, gate, n);
    linear(m, L.w_down, gate, T, out);
}

static void check_range(const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        throw std::invalid_argument(std::string("model hyper-parameter ") + what + " = " +
                                    std::to_string(v) + " is out of range [" + std::to_string(lo) +
                                    ", " + std::to_string(hi) + "]");
}

void load_common_hparams(const GGUFFile& f, HParams& hp) {
    const std::string a = hp.arch + ".";
    hp.n_layer = (int)f.get_u32(a + "block_count");
    hp.n_embd = (int)f.get_u32(a + "embedding_length");
    hp.n_ff = (int)f.get_u32(a + "feed_forward_length");
    hp.n_head = (int)f.get_u32(a + "attention.head_count");
    hp.n_head_kv = (int)f.get_u32(a + "attention.head_count_kv", (uint32_t)hp.n_head);
    check_range("block_count", hp.n_layer, 1, 4096);
    check_range("embedding_length", hp.n_embd, 1, 1 << 20);
    check_range("feed_forward_length", hp.n_ff, 1, 1 << 22);
    check_range("attention.head_count", hp.n_head, 1, 4096);
    check_range("attention.head_count_kv", hp.n_head_kv, 1, hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0)
        throw std::invalid_argument("head_count " + std::to_string(hp.n_head) +
                                    " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    hp.head_dim = (int)f.get_u32(a + "attention.key_length", (uint32_t)(hp.n_embd / hp.n_head));
    check_range("attention.key_length", hp.head_dim, 2, 1 << 14);
    hp.rope_dims = (int)f.get_u32(a + "rope.dimension_count", (uint32_t)hp.head_dim);
    check_range("rope.dimension_count", hp.rope_dims, 2, hp.head_dim);
    if (hp.rope_dims % 2 || hp.head_dim % 2) throw std::invalid_argument("head/rope dims must be even");
    hp.rope_base = f.get_f32(a + "rope.freq_base", 10000.0f);
    hp.rope_base_swa = hp.rope_base;
    hp.norm_eps = f.get_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    hp.n_ctx_train = (int)f.get_u32(a + "context_length", 2048);
    hp.attn_scale = 1.0f / sqrtf((float)hp.head_dim);
    const GGUFTensor* emb = f.tensor("token_embd.weight");
    if (!emb || emb->n_dims != 2) throw std::invalid_argument("model file lacks a 2-D token_embd.weight");
    hp.n_vocab = (int)emb->ne[1];
    hp.layer_is_swa.assign(hp.n_layer, 0);
}

void load_common_weights(const Model& m, ModelWeights& w) {
    const HParams& hp = m.hparams();
    const int64_t D = hp.n_embd, Q = (int64_t)hp.n_head * hp.head_dim;
    const int64_t KV = (int64_t)hp.n_head_kv * hp.head_dim, F = hp.n_ff, hd = hp.head_dim;
    w.tok_embd = m.weight("token_embd.weight", D, hp.n_vocab);
    w.output_norm = m.weight("output_norm.weight", D, 1);
    w.output = m.weight("output.weight", D, hp.n_vocab, false);
    if (!w.output.present()) w.output = w.tok_embd;   // tied embeddings
    w.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        LayerWeights& L = w.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = m.weight(p + "attn_norm.weight", D, 1);
        L.wq = m.weight(p + "attn_q.weight", D, Q);
        L.wk = m.weight(p + "attn_k.weight", D, KV);
        L.wv = m.weight(p + "attn_v.weight", D, KV);
        L.wo = m.weight(p + "attn_output.weight", Q, D);
        L.bq = m.weight(p + "attn_q.bias", Q, 1, false);
        L.bk = m.weight(p + "attn_k.bias", KV, 1, false);
        L.bv = m.weight(p + "attn_v.bias", KV, 1, false);
        L.q_norm = m.weight(p + "attn_q_norm.weight", hd, 1, false);
        L.k_norm = m.weight(p + "attn_k_norm.weight", hd, 1, false);
        L.attn_post_norm = m.weight(p + "post_attention_norm.weight", D, 1, false);
        L.ffn_norm = m.weight(p + "ffn_norm.weight", D, 1);
        L.w_gate = m.weight(p + "ffn_gate.weight", D, F);
        L.w_up = m.weight(p + "ffn_up.weight", D, F);
        L.w_down = m.weight(p + "ffn_down.weight", F, D);
        L.ffn_post_norm = m.weight(p + "post_ffw_norm.weight", D, 1, false);
    }
}

}  // namespace lll
