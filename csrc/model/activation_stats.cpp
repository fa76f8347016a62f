// activation_stats.cpp — the imatrix statistics (activation_stats.h).
#include "model/activation_stats.h"

#include <math.h>
#include <stdexcept>

namespace lll {

ActivationStats::Entry& ActivationStats::entry_for(const WeightRef& w) {
    const int64_t n_mat = w.expert >= 0 ? w.n_expert : 1;
    Entry& e = entries_[w.tensor];
    if (e.sum2.empty()) {
        e.n_cols = w.ne0;
        e.sum2.assign((size_t)(n_mat * w.ne0), 0.0f);
        e.counts.assign((size_t)n_mat, 0);
    } else if (e.n_cols != w.ne0 || (int64_t)e.counts.size() != n_mat) {
        throw std::logic_error("activation statistics of " + w.tensor + ": the matrix changed shape");
    }
    return e;
}

void ActivationStats::observe(const WeightRef& w, const float* x, int64_t T) {
    if (w.tensor.compare(0, 4, "blk.") != 0) return;
    if (w.expert < 0 && T < kMinDenseRows) return;
    Entry& e = entry_for(w);
    const int64_t K = w.ne0;
    float* acc = e.sum2.data() + (w.expert >= 0 ? (int64_t)w.expert * K : 0);
    // Row after row, each column's float sum in place: llama-imatrix's order.
    for (int64_t t = 0; t < T; ++t) {
        const float* r = x + t * K;
        for (int64_t j = 0; j < K; ++j) acc[j] += r[j] * r[j];
    }
    for (int64_t j = 0; j < K; ++j)
        if (!isfinite(acc[j]))
            throw std::runtime_error("activation statistics of " + w.tensor + ": non-finite sum of squares");
    e.counts[w.expert >= 0 ? w.expert : 0] += T;
}

}  // namespace lll
