// footprint_cuda.cpp — see footprint_cuda.h.
#include "backends/cuda/footprint_cuda.h"
#include <algorithm>
#include "common/blocks.h"
#include "model/footprint.h"
#include "model/model.h"
#include "model/weights.h"

namespace lll {

size_t cuda_weight_bytes(const WeightRef& w) {
    return w.present() ? (w.bytes() + kCudaWeightAlign - 1) / kCudaWeightAlign * kCudaWeightAlign : 0;
}

CudaScratchParts cuda_scratch_parts(const HParams& hp, int64_t T) {
    const int64_t q_width = (int64_t)hp.n_head * hp.head_dim;
    const int64_t widest = std::max<int64_t>({hp.n_embd, q_width, hp.ffn_width()});
    CudaScratchParts p;
    p.activations = act_scratch_floats(hp, T) * sizeof(float);
    p.logits = (size_t)T * (size_t)hp.n_vocab * sizeof(float);
    p.rope_tables = 2 * (size_t)T * (size_t)hp.rope_dims * sizeof(float);
    p.act_q8 = (size_t)std::min<int64_t>(T, kCudaDecodeRows) * (size_t)((widest + 31) / 32) * sizeof(block_q8_1);
    p.batch_ids = 5 * (size_t)T * sizeof(int32_t);
    return p;
}

size_t cuda_scratch_bytes(const HParams& hp, int64_t T) { return cuda_scratch_parts(hp, T).total(); }

WeightsScratchBytes cuda_footprint(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa, Numerics numerics) {
    WeightsScratchBytes b;
    for (const WeightRef* w : pw.matrices) b.weights += cuda_weight_bytes(*w);
    for (const WeightRef* w : pw.vectors) b.weights += cuda_weight_bytes(*w);
    b.scratch = cuda_scratch_bytes(hp, T);
    return b;
}

}  // namespace lll
