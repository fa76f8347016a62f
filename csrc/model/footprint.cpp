// footprint.cpp — see footprint.h.
#include "model/footprint.h"
#include "backends/registry.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/weights.h"

namespace lll {

size_t act_scratch_floats(const HParams& hp, int64_t T) {
    const int64_t q_width = (int64_t)hp.n_head * hp.head_dim;
    const int64_t kv_width = (int64_t)hp.n_head_kv * hp.head_dim;
    // x, h, tmp: n_embd; q, attn: q_width; k, v: kv_width; gate, up: ffn_width; with experts,
    // router: n_expert, moe_x, moe_y: n_embd, moe_acc: n_expert_used * n_embd
    const int64_t moe = hp.n_expert > 0 ? hp.n_expert + (2 + (int64_t)hp.n_expert_used) * hp.n_embd : 0;
    return (size_t)T * (size_t)(3 * hp.n_embd + 2 * q_width + 2 * kv_width + 2 * hp.ffn_width() + moe);
}

DeviceBytes device_bytes(Placement p, const HParams& hp, const PlacedWeights& pw, int64_t kv_blocks,
                         int kv_block_size, const KVTypes& kv_types, int64_t T, Isa isa, Numerics numerics) {
    DeviceBytes d;
    d.kv = (size_t)pw.n_layers * KVCache::layer_bytes(kv_blocks, kv_block_size, (int64_t)hp.n_head_kv * hp.head_dim,
                                                          kv_types);
    const WeightsScratchBytes own = backend_info(p).footprint(hp, pw, T, isa, numerics);
    d.weights = own.weights;
    d.scratch = own.scratch;
    return d;
}

}  // namespace lll
