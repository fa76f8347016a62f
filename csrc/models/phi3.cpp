// phi3.cpp — the phi3 architecture (Phi-3, Phi-3.5, Phi-4-mini): the llama block with Q, K and V
// in one fused attn_qkv matrix and gate and up in one ffn_up matrix (weights.h's fused specs
// give each part a row view), NeoX RoPE, and q scaled by 1/sqrt(head_dim) after RoPE as
// llama.cpp's phi3 graph does (the scores are not scaled again). LongRoPE files (128k models)
// are refused by load_common_hparams. llama.cpp runs Phi-3's sliding window as full attention;
// so does this file (the key is not read).
#include <math.h>
#include "models/layer_blocks.h"
#include "models/llama.h"
#include "model/weights.h"

namespace lll {

static void phi3_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
    hp.q_scale = 1.0f / sqrtf((float)hp.head_dim);
    hp.attn_scale = 1.0f;
}

extern const ArchSpec kPhi3Arch = {"phi3", phi3_hparams, load_model_weights, llama_layer_forward};

}  // namespace lll
