// gemma2.cpp — the gemma2 architecture: gemma3's block without Q/K norms (embeddings scaled by
// sqrt(n_embd), post-attention and post-FFN norms, GELU-gated FFN, q scaled after RoPE), a
// sliding window on every other layer (the even ones) with the same RoPE, attention scores
// soft-capped (tanh(s/50)*50) and the logits soft-capped (tanh(l/30)*30), as llama.cpp's gemma2.
#include <math.h>
#include "models/gemma.h"
#include "models/layer_blocks.h"
#include "model/weights.h"

namespace lll {

static void gemma2_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
    hp.embd_scale = sqrtf((float)hp.n_embd);
    // llama.cpp: q scaled by 1/sqrt(head_dim) after RoPE (27B, the 46-layer one: by
    // 1/sqrt(n_embd / n_head)), the scores not scaled again.
    hp.q_scale = hp.n_layer == 46 ? 1.0f / sqrtf((float)(hp.n_embd / hp.n_head)) : 1.0f / sqrtf((float)hp.head_dim);
    hp.attn_scale = 1.0f;
    hp.n_swa = (int)f.get_u32("gemma2.attention.sliding_window", 4096);
    const int period = (int)f.get_u32("gemma2.attention.sliding_window_pattern", 2);
    for (int il = 0; il < hp.n_layer; ++il) hp.layer_is_swa[il] = hp.n_swa > 0 && period > 0 && il % period < period - 1;
    hp.rope_base_swa = f.get_f32("gemma2.rope.freq_base_swa", hp.rope_base);
    hp.rope_freq_scale_swa = hp.rope_scaling.freq_scale;
    hp.attn_softcap = f.get_f32("gemma2.attn_logit_softcapping", 50.0f);
    hp.final_softcap = f.get_f32("gemma2.final_logit_softcapping", 30.0f);
    if (!(hp.attn_softcap >= 0.0f) || !(hp.final_softcap >= 0.0f) || !isfinite(hp.attn_softcap) ||
        !isfinite(hp.final_softcap))
        throw std::invalid_argument("gemma2 soft-capping values must be finite and >= 0");
}

static void gemma2_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    load_model_weights(f, hp, w);
    for (size_t il = 0; il < w.layers.size(); ++il)
        if (!w.layers[il].attn_post_norm.present() || !w.layers[il].ffn_post_norm.present())
            throw std::invalid_argument("gemma2 layer " + std::to_string(il) + " lacks its post-norm tensors");
}

extern const ArchSpec kGemma2Arch = {"gemma2", gemma2_hparams, gemma2_weights, gemma_layer_forward};

}  // namespace lll
