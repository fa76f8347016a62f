// gemma3.cpp — the gemma3 architecture (text): embeddings scaled by sqrt(n_embd), Q/K RMSNorm,
// NeoX RoPE with a separate base on sliding-window layers (5 of every 6), q scaled after RoPE,
// post-attention and post-FFN norms, GELU-gated FFN. The GGUF norms already include Gemma's +1.
#include <math.h>
#include "models/gemma.h"
#include "models/layer_blocks.h"
#include "model/weights.h"

namespace lll {

static void gemma3_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
    hp.embd_scale = sqrtf((float)hp.n_embd);
    // llama.cpp's convention for gemma3 (not stored in the file): q is scaled by
    // 1/sqrt(head_dim) after RoPE and the scores are not scaled again.
    hp.q_scale = 1.0f / sqrtf((float)hp.head_dim);
    hp.attn_scale = 1.0f;
    hp.n_swa = (int)f.get_u32("gemma3.attention.sliding_window", 0);
    if (hp.n_swa > 0) {
        const int period = (int)f.get_u32("gemma3.attention.sliding_window_pattern", 6);
        for (int il = 0; il < hp.n_layer; ++il)
            hp.layer_is_swa[il] = period > 0 && (il % period) < period - 1;
        hp.rope_base_swa = f.get_f32("gemma3.rope.freq_base_swa", 10000.0f);
    }
}

void gemma_layer_forward(const LayerCtx& c, float* x, int64_t T) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.L;
    Backend& be = c.be;
    const int64_t D = hp.n_embd;
    float* h = be.scratch().h;     // [T, D] normalized input of a sub-layer
    float* y = be.scratch().tmp;   // [T, D] sub-layer output
    be.rms_norm(x, L.attn_norm, h, T, D, hp.norm_eps);
    attention_block(c, h, T, y);
    be.rms_norm(y, L.attn_post_norm, y, T, D, hp.norm_eps);
    be.add(x, y, T * D);
    be.rms_norm(x, L.ffn_norm, h, T, D, hp.norm_eps);
    ffn_block(c, h, T, y, FFNAct::GELU);
    be.rms_norm(y, L.ffn_post_norm, y, T, D, hp.norm_eps);
    be.add(x, y, T * D);
}

static void gemma3_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    load_model_weights(f, hp, w);
    for (size_t il = 0; il < w.layers.size(); ++il) {
        const LayerWeights& L = w.layers[il];
        if (!L.q_norm.present() || !L.k_norm.present() || !L.attn_post_norm.present() ||
            !L.ffn_post_norm.present())
            throw std::invalid_argument("gemma3 layer " + std::to_string(il) +
                                        " lacks q/k norm or post-norm tensors");
    }
}

extern const ArchSpec kGemma3Arch = {"gemma3", gemma3_hparams, gemma3_weights, gemma_layer_forward};

}  // namespace lll
