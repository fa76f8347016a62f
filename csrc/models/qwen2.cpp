// qwen2.cpp — the qwen2 architecture: the llama block with QKV biases (loaded when present)
// and NeoX-style RoPE (rotating the two halves of each head).
#include "models/layer_blocks.h"
#include "models/llama.h"
#include "model/weights.h"

namespace lll {

static void qwen2_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
}

extern const ArchSpec kQwen2Arch = {"qwen2", qwen2_hparams, load_model_weights, llama_layer_forward};

}  // namespace lll
