// activation_stats.h — what llama.cpp's imatrix collector gathers, for `localllm imatrix`: for every
// layer matrix W multiplied as y = x . W^T, the sum over the rows of x of x[j]^2 for each input
// column j, and the number of rows summed; for a 3-D experts tensor, one sum and count per expert.
//
// The CPU backend calls observe() on each matrix's float input before it is quantized, when a
// Model collects (Model::collect_activations); otherwise no pointer is set and nothing is done.
// The rules are llama-imatrix's (tools/imatrix/imatrix.cpp): only `blk.*` tensors (not the output
// head); a dense matmul of fewer than 16 rows is skipped (its decode-sized batches), an expert's
// rows never are; the matrices of a fused tensor (attn_qkv) share one entry, observed once.
#pragma once
#include <stdint.h>
#include <map>
#include <string>
#include <vector>
#include "model/tensor.h"

namespace lll {

class ActivationStats {
public:
    struct Entry {
        int64_t n_cols = 0;            // the matrix's row length (x's columns)
        std::vector<float> sum2;       // [n_mat, n_cols]: n_mat = the experts, or 1
        std::vector<int64_t> counts;   // [n_mat] rows summed
    };
    static constexpr int64_t kMinDenseRows = 16;

    // x[T, w.ne0]: the float input of a matmul with w.
    void observe(const WeightRef& w, const float* x, int64_t T);
    const std::map<std::string, Entry>& entries() const { return entries_; }

private:
    Entry& entry_for(const WeightRef& w);
    std::map<std::string, Entry> entries_;
};

}  // namespace lll
