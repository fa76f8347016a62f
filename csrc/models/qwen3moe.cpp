// qwen3moe.cpp — the qwen3moe architecture (Qwen3-30B-A3B, Qwen3-235B-A22B): the qwen3 attention
// block (per-head Q/K RMSNorm, NeoX RoPE) and, in place of the dense FFN, a mixture of experts
// (moe_block.cpp) in every layer.
#include <stdexcept>
#include "models/layer_blocks.h"
#include "models/llama.h"
#include "model/weights.h"

namespace lll {

static void qwen3moe_hparams(const GGUFFile& f, HParams& hp) {
    load_common_hparams(f, hp);
    hp.rope_style = RopeStyle::NeoX;
    const std::string a = hp.arch + ".";
    hp.n_expert = (int)f.get_u32(a + "expert_count", 0);
    hp.n_expert_used = (int)f.get_u32(a + "expert_used_count", 0);
    if (hp.n_expert < 1 || hp.n_expert > 4096)
        throw std::invalid_argument("qwen3moe needs " + a + "expert_count in [1, 4096], got " + std::to_string(hp.n_expert));
    if (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert)
        throw std::invalid_argument("qwen3moe needs " + a + "expert_used_count in [1, expert_count = " +
                                    std::to_string(hp.n_expert) + "], got " + std::to_string(hp.n_expert_used));
    // llama.cpp's default when the file has no expert width.
    hp.n_ff_exp = (int)f.get_u32(a + "expert_feed_forward_length", (uint32_t)(hp.n_ff / hp.n_expert_used));
    if (hp.n_ff_exp < 1 || hp.n_ff_exp > (1 << 22))
        throw std::invalid_argument(a + "expert_feed_forward_length = " + std::to_string(hp.n_ff_exp) +
                                    " is out of range [1, 4194304]");
}

static void qwen3moe_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    load_model_weights(f, hp, w);
    require_qk_norms(w, "qwen3moe");
}

static void qwen3moe_layer_forward(const LayerCtx& c, float* x, int64_t T) { pre_norm_layer(c, x, T, moe_ffn_block); }

extern const ArchSpec kQwen3MoeArch = {"qwen3moe", qwen3moe_hparams, qwen3moe_weights, qwen3moe_layer_forward};

}  // namespace lll
