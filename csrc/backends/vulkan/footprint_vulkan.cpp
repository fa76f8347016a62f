// footprint_vulkan.cpp — see footprint_vulkan.h.
#include "backends/vulkan/footprint_vulkan.h"
#include <algorithm>
#include "model/footprint.h"
#include "model/model.h"
#include "model/weights.h"

namespace lll {

int64_t vulkan_logits_rows(const HParams& hp, int64_t T) {
    const int64_t fit = (int64_t)(kVulkanLogitsBytes / ((size_t)std::max(hp.n_vocab, 1) * sizeof(float)));
    return std::max<int64_t>(1, std::min(T, fit));
}

VulkanScratchParts vulkan_scratch_parts(const HParams& hp, int64_t T) {
    VulkanScratchParts p;
    p.activations = act_scratch_floats(hp, T) * sizeof(float);
    p.logits = (size_t)vulkan_logits_rows(hp, T) * (size_t)hp.n_vocab * sizeof(float);
    p.rope_tables = 2 * (size_t)T * (size_t)hp.rope_dims * sizeof(float);
    p.batch_ids = 3 * (size_t)T * sizeof(int32_t);
    const int64_t widest = std::max<int64_t>({hp.n_embd, hp.n_ff, (int64_t)hp.n_head * hp.head_dim});
    p.int8_activations = (size_t)(T * widest / 32) * (32 + 8);
    return p;
}

WeightsScratchBytes vulkan_footprint(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa,
                                     Numerics numerics) {
    WeightsScratchBytes b;
    for (const WeightRef* w : pw.matrices) b.weights += w->present() ? w->bytes() : 0;
    for (const WeightRef* w : pw.vectors) b.weights += w->present() ? w->bytes() : 0;
    b.scratch = vulkan_scratch_parts(hp, T).total();
    return b;
}

}  // namespace lll
