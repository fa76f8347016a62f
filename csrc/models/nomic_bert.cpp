// nomic_bert.cpp — the nomic-bert architecture (nomic-embed-text): BERT's post-norm encoder with
// rotary positions (NeoX halves) instead of learned ones, no biases in attention or FFN, and a
// SwiGLU FFN. Shares the encoder input and block with bert (encoder.h).
#include "models/encoder.h"
#include "models/layer_blocks.h"
#include "model/weights.h"

namespace lll {

static void nomic_bert_hparams(const GGUFFile& f, HParams& hp) {
    load_encoder_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
}

static void nomic_bert_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    load_encoder_weights(f, hp, w);
    using L = LayerWeights;
    require_layer_weights(w, hp, {{&L::wq, "attn_q.weight (or attn_qkv.weight)"}, {&L::wk, "attn_k.weight"},
                                  {&L::wv, "attn_v.weight"}, {&L::attn_out_norm, "attn_output_norm.weight"},
                                  {&L::attn_out_norm_b, "attn_output_norm.bias"}, {&L::w_gate, "ffn_gate.weight"},
                                  {&L::w_up, "ffn_up.weight"}, {&L::w_down, "ffn_down.weight"},
                                  {&L::out_norm, "layer_output_norm.weight"},
                                  {&L::out_norm_b, "layer_output_norm.bias"}});
}

static void swiglu_ffn(const LayerCtx& c, const float* h, int64_t T, float* out) {
    ffn_block(c, h, T, out, FFNAct::SiLU);
}

static void nomic_bert_layer_forward(const LayerCtx& c, float* x, int64_t T) { post_norm_layer(c, x, T, swiglu_ffn); }

extern const ArchSpec kNomicBertArch = {"nomic-bert", nomic_bert_hparams, nomic_bert_weights, nomic_bert_layer_forward,
                                        true, encoder_input};

}  // namespace lll
