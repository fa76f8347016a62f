// footprint_cpu.cpp — see footprint_cpu.h.
#include "backends/cpu/footprint_cpu.h"
#include <stdlib.h>
#include <algorithm>
#include "backends/cpu/ggml_numerics/ggml_order.h"
#include "backends/cpu/matmul.h"
#include "model/footprint.h"
#include "model/model.h"
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

WeightsScratchBytes cpu_footprint(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa, Numerics numerics) {
    const std::vector<const WeightRef*> mats(pw.matrices.begin(), pw.matrices.end());
    const std::vector<const WeightRef*> vecs(pw.vectors.begin(), pw.vectors.end());
    WeightsScratchBytes b;
    b.weights = cpu_repack_layout(mats, isa, numerics, nullptr);
    if (b.weights > 0) b.weights += cpu_vector_copy_bytes(vecs);
    b.scratch = act_scratch_floats(hp, T) * sizeof(float) + cpu_act_quant_bytes(hp, mats, T);
    return b;
}

}  // namespace lll
