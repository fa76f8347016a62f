// footprint.cpp — see footprint.h.
#include "model/footprint.h"
#include <stdlib.h>
#include <algorithm>
#include "backends/cpu/matmul.h"
#include "model/model.h"
#include "backends/cpu/ggml_numerics/ggml_order.h"
#include "model/weights.h"

namespace lll {

static bool repack_turned_off() {
    const char* v = getenv("LOCALLLM_NO_REPACK");
    return v && *v && *v != '0';
}

bool cpu_repacks(const WeightRef& w, Isa isa, Numerics numerics) {
    if (!w.present() || repack_turned_off() || !can_repack(w.type, isa)) return false;
    // llama.cpp-order kernels read the GGUF rows.
    return !(numerics == Numerics::LlamaCpp && ggml_order::supported(w.type, w.ne1));
}

size_t cpu_repack_layout(const std::vector<const WeightRef*>& matrices, Isa isa, Numerics numerics,
                         std::vector<size_t>* offsets) {
    size_t total = 0;
    if (offsets) offsets->assign(matrices.size(), 0);
    for (size_t i = 0; i < matrices.size(); ++i) {
        const WeightRef& w = *matrices[i];
        if (!cpu_repacks(w, isa, numerics)) continue;
        if (offsets) (*offsets)[i] = total;
        total += (repacked_bytes(w.type, w.ne1, w.ne0) + 63) / 64 * 64;
    }
    return total;
}

size_t cpu_vector_copy_bytes(const std::vector<const WeightRef*>& vectors) {
    size_t total = 0;
    for (const WeightRef* w : vectors)
        if (w->present()) total += (size_t)(w->ne0 * w->ne1) * sizeof(float);
    return total;
}

size_t cpu_act_quant_bytes(const HParams& hp, const std::vector<const WeightRef*>& matrices, int64_t T) {
    // Room for the activation formats these matrices use (not every format: f32's is 4x Q8's,
    // and zeroed pages are touched as used): widths rounded up to the largest block (Q8_K's
    // 256), since a model's widest row need not be a multiple of every block.
    const int64_t q_width = (int64_t)hp.n_head * hp.head_dim;
    const int64_t widest = std::max<int64_t>({hp.n_embd, q_width, hp.ffn_width()});
    const int64_t widest_blocks = (widest + QK_K - 1) / QK_K * QK_K;
    size_t bytes = 0;
    for (const WeightRef* w : matrices)
        if (w->present())
            bytes = std::max(bytes, act_buffer_bytes(type_traits(w->type)->vec_dot_type, T, widest_blocks));
    return bytes;
}

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
    const std::vector<const WeightRef*> mats(pw.matrices.begin(), pw.matrices.end());
    const std::vector<const WeightRef*> vecs(pw.vectors.begin(), pw.vectors.end());
    DeviceBytes d;
    d.kv = (size_t)pw.n_layers * KVCache::layer_bytes(kv_blocks, kv_block_size, (int64_t)hp.n_head_kv * hp.head_dim,
                                                          kv_types);
    if (p == Placement::CPU) {
        d.weights = cpu_repack_layout(mats, isa, numerics, nullptr);
        if (d.weights > 0) d.weights += cpu_vector_copy_bytes(vecs);
        d.scratch = act_scratch_floats(hp, T) * sizeof(float) + cpu_act_quant_bytes(hp, mats, T);
    } else {
        for (const WeightRef* w : mats) d.weights += cuda_weight_bytes(*w);
        for (const WeightRef* w : vecs) d.weights += cuda_weight_bytes(*w);
        d.scratch = cuda_scratch_bytes(hp, T);
    }
    return d;
}

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

}  // namespace lll
