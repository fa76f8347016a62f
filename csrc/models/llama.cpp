// llama.cpp — the llama architecture (Llama 2/3, SmolLM2, Mistral): pre-norm blocks,
// RMSNorm, RoPE on adjacent pairs, grouped-query attention, SwiGLU FFN.
#include <stdexcept>
#include <string>
#include "models/layer_blocks.h"
#include "models/llama.h"
#include "model/weights.h"

namespace lll {

static void llama_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::Normal;
}

void pre_norm_layer(const LayerCtx& c, float* x, int64_t T, FFNBlock ffn) {
    const HParams& hp = c.hp;
    Backend& be = c.be;
    const int64_t D = hp.n_embd;
    float* h = be.scratch().h;     // [T, D] normalized input of a sub-layer
    float* y = be.scratch().tmp;   // [T, D] sub-layer output
    be.rms_norm(x, c.L.attn_norm, h, T, D, hp.norm_eps);
    attention_block(c, h, T, y);
    be.add(x, y, T * D);
    be.rms_norm(x, c.L.ffn_norm, h, T, D, hp.norm_eps);
    ffn(c, h, T, y);
    be.add(x, y, T * D);
}

static void swiglu_ffn(const LayerCtx& c, const float* h, int64_t T, float* out) {
    ffn_block(c, h, T, out, FFNAct::SiLU);
}

void llama_layer_forward(const LayerCtx& c, float* x, int64_t T) { pre_norm_layer(c, x, T, swiglu_ffn); }

void require_qk_norms(const ModelWeights& w, const std::string& arch) {
    for (size_t il = 0; il < w.layers.size(); ++il)
        if (!w.layers[il].q_norm.present() || !w.layers[il].k_norm.present())
            throw std::invalid_argument(arch + " layer " + std::to_string(il) + " lacks attn_q_norm/attn_k_norm");
}

extern const ArchSpec kLlamaArch = {"llama", llama_hparams, load_model_weights, llama_layer_forward};

}  // namespace lll
