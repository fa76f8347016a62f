// layer_blocks.cpp — see layer_blocks.h.
#include "models/layer_blocks.h"
#include <math.h>
#include <string.h>
#include <stdexcept>

namespace lll {

void attention_block(const LayerCtx& c, const float* h, int64_t T, float* out) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.L;
    Backend& be = c.be;
    const int hd = hp.head_dim;
    float* q = be.scratch().q;                        // [T, n_head, hd]
    float* k = be.scratch().k;                        // [T, n_head_kv, hd]
    float* v = be.scratch().v;                        // [T, n_head_kv, hd]
    const LinearOut qkv[] = {{&L.wq, q, &L.bq}, {&L.wk, k, &L.bk}, {&L.wv, v, &L.bv}};
    be.linear_group(qkv, 3, h, T);
    if (L.q_norm.present()) be.rms_norm(q, L.q_norm, q, T * hp.n_head, hd, hp.norm_eps);
    if (L.k_norm.present()) be.rms_norm(k, L.k_norm, k, T * hp.n_head_kv, hd, hp.norm_eps);
    const bool swa = hp.n_swa > 0 && hp.layer_is_swa[c.il];
    const RopeFreqs freqs = hp.rope_freqs(c.il);
    if (hp.rope_positions) {
        be.rope(q, T, hp.n_head, hd, hp.rope_dims, freqs, hp.rope_style);
        be.rope(k, T, hp.n_head_kv, hd, hp.rope_dims, freqs, hp.rope_style);
    }
    if (hp.q_scale != 1.0f) be.scale(q, hp.q_scale, T * hp.n_head * hd);
    be.kv_write(c.kv, c.il, k, v, c.b);
    float* attn = be.scratch().attn;                  // [T, n_head, hd]
    be.attention(c.kv, c.il, q, attn, c.attn_batch(), AttnParams{hp.n_head, hp.n_head_kv, hd, hp.attn_scale, swa ? hp.n_swa : 0,
                                                         hp.attn_softcap});
    be.linear(L.wo, attn, T, out, &L.bo);
}

void ffn_block(const LayerCtx& c, const float* h, int64_t T, float* out, FFNAct act) {
    Backend& be = c.be;
    float* gate = be.scratch().gate;                  // [T, n_ff]
    float* up = be.scratch().up;                      // [T, n_ff]
    const LinearOut gate_up[] = {{&c.L.w_gate, gate, nullptr}, {&c.L.w_up, up, nullptr}};
    be.linear_group(gate_up, 2, h, T);
    be.glu(gate, up, gate, T * c.hp.n_ff, act);
    be.linear(c.L.w_down, gate, T, out);
}

static void check_range(const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        throw std::invalid_argument(std::string("model hyper-parameter ") + what + " = " +
                                    std::to_string(v) + " is out of range [" + std::to_string(lo) +
                                    ", " + std::to_string(hi) + "]");
}

// The {arch}.rope.* keys the runtime reads; any other is refused (rope_scaling below), so that a
// file never runs as if unscaled when its author meant a scaling this runtime lacks.
static const char* const kRopeKeys[] = {
    "rope.dimension_count", "rope.freq_base", "rope.freq_base_swa", "rope.scale_linear", "rope.scaling.type",
    "rope.scaling.factor", "rope.scaling.attn_factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned"};

static float positive_f32(const GGUFFile& f, const std::string& key, float dflt) {
    const float v = f.get_f32(key, dflt);
    if (!(v > 0.0f) || !isfinite(v))
        throw std::invalid_argument("model hyper-parameter " + key + " = " + std::to_string(v) +
                                    " must be a positive number");
    return v;
}

// Per-pair frequency factors, F32 [rope_dims/2] each: rope_freqs.weight (Llama 3's "llama3"
// RoPE type), or LongRoPE's rope_factors_long / rope_factors_short.weight. Empty when absent.
static std::vector<float> rope_freq_factors(const GGUFFile& f, const char* name, int rope_dims) {
    const GGUFTensor* t = f.tensor(name);
    if (!t) return {};
    if (t->type != GGMLType::F32 || t->n_dims != 1 || t->ne[0] != rope_dims / 2)
        throw std::invalid_argument(std::string("tensor '") + name + "' must be F32 of shape [" +
                                    std::to_string(rope_dims / 2) + "] (rope.dimension_count / 2)");
    std::vector<float> ff((size_t)(rope_dims / 2));
    memcpy(ff.data(), t->data, ff.size() * sizeof(float));
    for (float v : ff)
        if (!(v > 0.0f) || !isfinite(v))
            throw std::invalid_argument(std::string("tensor '") + name + "' holds " + std::to_string(v) +
                                        ": frequency factors must be positive numbers");
    return ff;
}

// RoPE scaling as llama.cpp reads it (llama_model::load_hparams) and sets up its context
// (llama_context: ext_factor 1 for YaRN, the YaRN attention factor): type "none", "linear"
// (freq_scale = 1 / factor) or "yarn"; the file's frequency factors; everything else refused.
static void load_rope_scaling(const GGUFFile& f, const std::string& a, HParams& hp) {
    for (const GGUFKeyValue& kv : f.metadata()) {
        const std::string key(kv.key);
        if (key.compare(0, a.size() + 5, a + "rope.") != 0) continue;
        bool known = false;
        for (const char* k : kRopeKeys) known = known || key == a + k;
        if (!known)
            throw std::invalid_argument("model key '" + key + "' asks for RoPE behaviour this runtime does not "
                                        "implement (it reads rope.scaling.type none/linear/yarn, factor, "
                                        "attn_factor, original_context_length, rope_freqs.weight and "
                                        "LongRoPE's rope_factors_long/short.weight)");
    }
    RopeScaling& sc = hp.rope_scaling;
    const std::string type = f.get_string(a + "rope.scaling.type", "linear");
    if (type != "none" && type != "linear" && type != "yarn")
        throw std::invalid_argument("RoPE scaling type '" + type + "' (" + a + "rope.scaling.type) is not supported " +
                                    "(supported: none, linear, yarn)");
    const std::string factor_key = f.has(a + "rope.scaling.factor") ? a + "rope.scaling.factor" : a + "rope.scale_linear";
    const float factor = f.has(factor_key) ? positive_f32(f, factor_key, 1.0f) : 1.0f;
    sc.freq_scale = type == "none" ? 1.0f : 1.0f / factor;
    sc.n_ctx_orig = (int)f.get_u32(a + "rope.scaling.original_context_length", (uint32_t)hp.n_ctx_train);
    if (sc.n_ctx_orig < 1) throw std::invalid_argument(a + "rope.scaling.original_context_length must be >= 1");
    if (type == "yarn") {
        sc.ext_factor = 1.0f;
        // llama.cpp's context: the YaRN magnitude 0.1 ln(factor) + 1, divided by the factor that
        // ggml's rope multiplies in again (the same floats, so the product is llama.cpp's).
        const float fs = 1.0f / sc.freq_scale;
        sc.attn_factor = fs <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(fs) + 1.0f;
        sc.attn_factor *= 1.0f / (1.0f + 0.1f * logf(fs));
    }
    sc.attn_factor *= positive_f32(f, a + "rope.scaling.attn_factor", 1.0f);
    hp.rope_freq_factors = rope_freq_factors(f, "rope_freqs.weight", hp.rope_dims);
    // LongRoPE (llama.cpp: get_rope_factors; rope_freqs.weight, when present, wins): both or none.
    if (hp.rope_freq_factors.empty()) {
        hp.rope_factors_long = rope_freq_factors(f, "rope_factors_long.weight", hp.rope_dims);
        hp.rope_factors_short = rope_freq_factors(f, "rope_factors_short.weight", hp.rope_dims);
        if (hp.rope_factors_long.empty() != hp.rope_factors_short.empty())
            throw std::invalid_argument("LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight");
        hp.rope_freq_factors = hp.rope_factors_short;
    }
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
    load_rope_scaling(f, a, hp);
    hp.attn_scale = 1.0f / sqrtf((float)hp.head_dim);
    const GGUFTensor* emb = f.tensor("token_embd.weight");
    if (!emb || emb->n_dims != 2) throw std::invalid_argument("model file lacks a 2-D token_embd.weight");
    hp.n_vocab = (int)emb->ne[1];
    hp.layer_is_swa.assign(hp.n_layer, 0);
}

}  // namespace lll
