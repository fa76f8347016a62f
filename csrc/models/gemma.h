// gemma.h — the Gemma block (gemma3.cpp), shared by gemma2 and gemma3.
#pragma once
#include "model/model.h"

namespace lll {
// x[T, n_embd] += post_norm(attention(norm(x))); x += post_norm(geglu_ffn(norm(x)))
void gemma_layer_forward(const LayerCtx& c, float* x, int64_t T);
}
