// llama.h — the llama block, reused by architectures that differ only in their hyper-parameters.
#pragma once
#include "../model.h"

namespace lll {
// x[T, n_embd] += attention(norm(x)); x += swiglu_ffn(norm(x))
void llama_layer_forward(const LayerCtx& c, float* x, int64_t T);
}
