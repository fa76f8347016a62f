// moe_block.cpp — the mixture-of-experts FFN (qwen3moe), computed as llama.cpp's build_moe_ffn
// computes it for softmax gating with normalized weights: a router picks each token's top
// n_expert_used experts; each expert is a SwiGLU FFN; a token's output is the sum, in the order
// of the router's ranking, of its experts' outputs times their renormalized probabilities.
//
// The experts' matmuls are grouped by expert: the batch's tokens routed to an expert are gathered
// into one block of rows, so each expert's weights are read once per batch, however many tokens
// chose it. A token's output is summed in rank order from per-(token, rank) slots, so it never
// depends on which other tokens share its batch (batch invariance, as for the dense FFN).
//
// Routing, gathering and scattering read the activations on the host: MoE layers run on the CPU
// backend (the Model refuses GPU layers for a file with experts).
#include <math.h>
#include <string.h>
#include <algorithm>
#include <stdexcept>
#include <vector>
#include "models/layer_blocks.h"

namespace lll {

// sel, wts [T, k]: each token's experts, most probable first, and their weights.
static void route_tokens(const float* logits, int64_t T, int n_expert, int k, int32_t* sel, float* wts) {
    std::vector<float> p((size_t)n_expert);
    std::vector<int32_t> order((size_t)n_expert);
    for (int64_t t = 0; t < T; ++t) {
        const float* l = logits + t * n_expert;   // [n_expert]
        // ggml_soft_max: exp(l - max), summed in double, scaled by the float reciprocal.
        const float mx = *std::max_element(l, l + n_expert);
        double sum = 0.0;
        for (int e = 0; e < n_expert; ++e) sum += (double)(p[e] = expf(l[e] - mx));
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < n_expert; ++e) p[e] *= inv;
        for (int e = 0; e < n_expert; ++e) order[e] = e;
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
        // Normalized to sum to 1; the sum clamped at F16's smallest normal, as llama.cpp does.
        double picked = 0.0;
        for (int r = 0; r < k; ++r) picked += (double)p[order[r]];
        const float denom = std::max((float)picked, 6.103515625e-5f);
        for (int r = 0; r < k; ++r) {
            sel[t * k + r] = order[r];
            wts[t * k + r] = p[order[r]] / denom;
        }
    }
}

void moe_ffn_block(const LayerCtx& c, const float* h, int64_t T, float* out) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.L;
    Backend& be = c.be;
    if (!be.host_memory()) throw std::logic_error("mixture-of-experts layers run on the CPU backend");
    const ActScratch& s = be.scratch();
    const int n_expert = hp.n_expert, k = hp.n_expert_used;
    const int64_t D = hp.n_embd, F = hp.n_ff_exp;
    be.linear(L.ffn_gate_inp, h, T, s.router);             // router [T, n_expert]
    std::vector<int32_t> sel((size_t)(T * k));             // [T, k] expert ids
    std::vector<float> wts((size_t)(T * k));               // [T, k] their weights
    route_tokens(s.router, T, n_expert, k, sel.data(), wts.data());
    // The (token, rank) slots of each expert, in token order: slots[first[e] .. first[e + 1]).
    std::vector<int64_t> first((size_t)n_expert + 1, 0), slots((size_t)(T * k));
    for (int64_t i = 0; i < T * k; ++i) ++first[sel[i] + 1];
    for (int e = 0; e < n_expert; ++e) first[e + 1] += first[e];
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) slots[fill[sel[i]]++] = i;
    for (int e = 0; e < n_expert; ++e) {
        const int64_t n = first[e + 1] - first[e];
        if (n == 0) continue;
        const int64_t* mine = slots.data() + first[e];
        for (int64_t j = 0; j < n; ++j)                     // moe_x [n, D] the tokens' inputs
            memcpy(s.moe_x + j * D, h + (mine[j] / k) * D, (size_t)D * sizeof(float));
        const LinearOut gate_up[] = {{&L.gate_exps[e], s.gate, nullptr}, {&L.up_exps[e], s.up, nullptr}};
        be.linear_group(gate_up, 2, s.moe_x, n);            // gate, up [n, F]
        be.glu(s.gate, s.up, s.gate, n * F, FFNAct::SiLU);
        be.linear(L.down_exps[e], s.gate, n, s.moe_y);      // moe_y [n, D]
        for (int64_t j = 0; j < n; ++j) {                   // moe_acc[token, rank] = weight * output
            const float w = wts[mine[j]];
            const float* y = s.moe_y + j * D;
            float* acc = s.moe_acc + mine[j] * D;
            for (int64_t d = 0; d < D; ++d) acc[d] = y[d] * w;
        }
    }
    for (int64_t t = 0; t < T; ++t) {                       // out[t] = sum over ranks, in rank order
        const float* acc = s.moe_acc + t * k * D;
        float* o = out + t * D;
        memcpy(o, acc, (size_t)D * sizeof(float));
        for (int r = 1; r < k; ++r)
            for (int64_t d = 0; d < D; ++d) o[d] += acc[r * D + d];
    }
}

}  // namespace lll
