// qwen3.cpp — the qwen3 architecture (dense Qwen3): the qwen2 block without QKV biases, with
// per-head RMSNorm on Q and K before RoPE (attention_block applies them when present) and an
// explicit head size (attention.key_length; Q is n_head * head_dim wide, not n_embd).
#include "models/layer_blocks.h"
#include "models/llama.h"
#include "model/weights.h"

namespace lll {

static void qwen3_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
}

static void qwen3_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    load_model_weights(f, hp, w);
    require_qk_norms(w, "qwen3");
}

extern const ArchSpec kQwen3Arch = {"qwen3", qwen3_hparams, qwen3_weights, llama_layer_forward};

}  // namespace lll
