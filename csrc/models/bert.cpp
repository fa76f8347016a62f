// bert.cpp — the bert architecture (all-MiniLM, bge, e5, BERT cross-encoders): learned absolute
// positions and token types, bidirectional attention with biases, post-norm LayerNorm blocks,
// a GELU FFN with biases. No output head: the model gives hidden states, which the caller pools
// (python/localllm/embed.py). Shared encoder parts live here too (encoder.h).
#include "models/encoder.h"
#include <stdexcept>
#include <string>
#include <vector>
#include "models/layer_blocks.h"
#include "model/weights.h"

namespace lll {

void load_encoder_hparams(const GGUFFile& f, HParams& hp) {
    const std::string a = hp.arch + ".";
    load_common_hparams(f, hp);
    hp.norm_eps = f.get_f32(a + "attention.layer_norm_epsilon", 1e-12f);
    if (f.get_bool(a + "attention.causal", false))
        throw std::invalid_argument(a + "attention.causal is true: causal " + hp.arch + " models are not supported");
    const GGUFTensor* types = f.tensor("token_types.weight");
    hp.n_type = types && types->n_dims == 2 ? (int)types->ne[1] : 0;
}

void load_encoder_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    const int64_t D = hp.n_embd;
    w.tok_embd = load_weight(f, "token_embd.weight", WeightKind::Matrix, D, hp.n_vocab, true);
    if (hp.n_type > 0) w.type_embd = load_weight(f, "token_types.weight", WeightKind::Matrix, D, hp.n_type, true);
    w.embd_norm = load_weight(f, "token_embd_norm.weight", WeightKind::Vector, D, 1, true);
    w.embd_norm_b = load_weight(f, "token_embd_norm.bias", WeightKind::Vector, D, 1, true);
    load_layer_weights(f, hp, w, true);
}

void require_layer_weights(const ModelWeights& w, const HParams& hp,
                           std::initializer_list<std::pair<WeightRef LayerWeights::*, const char*>> what) {
    for (size_t il = 0; il < w.layers.size(); ++il)
        for (const auto& [member, name] : what)
            if (!(w.layers[il].*member).present())
                throw std::invalid_argument("model file lacks tensor 'blk." + std::to_string(il) + "." + name +
                                            "' (" + hp.arch + ")");
}

void encoder_input(Backend& be, const HParams& hp, const ModelWeights& w, const Batch& b, float* x, int64_t T) {
    const int64_t D = hp.n_embd;
    float* rows = be.scratch().tmp;   // [T, D]
    if (w.type_embd.present()) {
        static thread_local std::vector<int32_t> zeros;
        const int32_t* types = b.token_types;
        if (!types) {
            zeros.assign((size_t)T, 0);
            types = zeros.data();
        }
        for (int64_t t = 0; t < T; ++t)
            if (types[t] < 0 || types[t] >= hp.n_type)
                throw std::invalid_argument("token type " + std::to_string(types[t]) + " out of range [0, " +
                                            std::to_string(hp.n_type) + ")");
        be.embed(EmbeddingTable{w.type_embd}, types, T, rows);
        be.add(x, rows, T * D);
    }
    if (w.pos_embd.present()) {
        for (int64_t t = 0; t < T; ++t)
            if (b.positions[t] >= w.pos_embd.ne1)
                throw std::invalid_argument("position " + std::to_string(b.positions[t]) + " is beyond the " +
                                            std::to_string(w.pos_embd.ne1) + " positions " + hp.arch +
                                            " was trained for");
        be.embed(EmbeddingTable{w.pos_embd}, b.positions, T, rows);
        be.add(x, rows, T * D);
    }
    be.layer_norm(x, w.embd_norm, w.embd_norm_b, x, T, D, hp.norm_eps);
}

void post_norm_layer(const LayerCtx& c, float* x, int64_t T, FFNBlock ffn) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.L;
    Backend& be = c.be;
    const int64_t D = hp.n_embd;
    float* y = be.scratch().tmp;   // [T, D] sub-layer output
    attention_block(c, x, T, y);
    be.add(x, y, T * D);
    be.layer_norm(x, L.attn_out_norm, L.attn_out_norm_b, x, T, D, hp.norm_eps);
    ffn(c, x, T, y);
    be.add(x, y, T * D);
    be.layer_norm(x, L.out_norm, L.out_norm_b, x, T, D, hp.norm_eps);
}

static void bert_hparams(const GGUFFile& f, HParams& hp) {
    load_encoder_hparams(f, hp);
    hp.rope_positions = false;
}

static void bert_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    load_encoder_weights(f, hp, w);
    w.pos_embd = load_weight(f, "position_embd.weight", WeightKind::Matrix, hp.n_embd, hp.n_ctx_train, true);
    using L = LayerWeights;
    require_layer_weights(w, hp, {{&L::wq, "attn_q.weight"}, {&L::bq, "attn_q.bias"}, {&L::wk, "attn_k.weight"},
                                  {&L::bk, "attn_k.bias"}, {&L::wv, "attn_v.weight"}, {&L::bv, "attn_v.bias"},
                                  {&L::bo, "attn_output.bias"}, {&L::attn_out_norm, "attn_output_norm.weight"},
                                  {&L::attn_out_norm_b, "attn_output_norm.bias"}, {&L::w_up, "ffn_up.weight"},
                                  {&L::b_up, "ffn_up.bias"}, {&L::w_down, "ffn_down.weight"},
                                  {&L::b_down, "ffn_down.bias"}, {&L::out_norm, "layer_output_norm.weight"},
                                  {&L::out_norm_b, "layer_output_norm.bias"}});
}

// out = down(gelu(up(h) + b_up)) + b_down
static void gelu_ffn(const LayerCtx& c, const float* h, int64_t T, float* out) {
    Backend& be = c.be;
    float* up = be.scratch().gate;   // [T, n_ff]
    be.linear(c.L.w_up, h, T, up, &c.L.b_up);
    be.gelu(up, T * c.hp.n_ff);
    be.linear(c.L.w_down, up, T, out, &c.L.b_down);
}

static void bert_layer_forward(const LayerCtx& c, float* x, int64_t T) { post_norm_layer(c, x, T, gelu_ffn); }

extern const ArchSpec kBertArch = {"bert", bert_hparams, bert_weights, bert_layer_forward, true, encoder_input};

}  // namespace lll
