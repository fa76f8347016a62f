// encoder.h — what the encoder architectures (bert.cpp, nomic_bert.cpp) share: BERT's
// hyper-parameters, its input (token + token type (+ position) embeddings, then LayerNorm) and
// its post-norm block (x = LN(x + attention(x)); x = LN(x + ffn(x))). Attention goes through
// attention_block with the model's bidirectional view (every token sees its whole sequence).
#pragma once
#include <stdint.h>
#include "models/llama.h"
#include "model/model.h"

namespace lll {

// load_common_hparams with the LayerNorm epsilon ({arch}.attention.layer_norm_epsilon), the token
// type count and no causal attention ({arch}.attention.causal must be absent or false).
void load_encoder_hparams(const GGUFFile& f, HParams& hp);
// The input embeddings and norm; the layers' weights (every one checked by the architecture).
void load_encoder_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w);
// Throws naming the first weight of `what` that layer il lacks.
void require_layer_weights(const ModelWeights& w, const HParams& hp,
                           std::initializer_list<std::pair<WeightRef LayerWeights::*, const char*>> what);
// x[T, D] += type rows (+ position rows); x = LayerNorm(x) (ArchSpec::input_forward).
void encoder_input(Backend& be, const HParams& hp, const ModelWeights& w, const Batch& b, float* x, int64_t T);
// The post-norm block with the FFN `ffn` on x (not normalized first).
void post_norm_layer(const LayerCtx& c, float* x, int64_t T, FFNBlock ffn);

}  // namespace lll
