// llama.cpp — the llama architecture (Llama 2/3, SmolLM2, Mistral): pre-norm blocks,
// RMSNorm, RoPE on adjacent pairs, grouped-query attention, SwiGLU FFN.
#include "layer_blocks.h"
#include "llama.h"
#include "../ops.h"

namespace lll {

static void llama_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::Normal;
}

void llama_layer_forward(Model& m, int il, float* x, int64_t T, const Batch& b) {
    const HParams& hp = m.hparams();
    const LayerWeights& L = m.weights().layers[il];
    const int64_t D = hp.n_embd;
    float* h = m.s.h.data();       // [T, D] normalized input of a sub-layer
    float* y = m.s.tmp.data();     // [T, D] sub-layer output
    rms_norm_rows(m.pool(), x, L.attn_norm.f32(), h, T, D, hp.norm_eps);
    attention_block(m, il, h, T, b, y);
    add_inplace(x, y, T * D);
    rms_norm_rows(m.pool(), x, L.ffn_norm.f32(), h, T, D, hp.norm_eps);
    ffn_block(m, il, h, T, y, FFNAct::SiLU);
    add_inplace(x, y, T * D);
}

extern const ArchSpec kLlamaArch = {"llama", llama_hparams, load_common_weights, llama_layer_forward};

}  // namespace lll
