// weights.cpp — see weights.h.
#include "model/weights.h"
#include <stdexcept>
#include "backends/cpu/quants/quants.h"
#include "backends/registry.h"

namespace lll {

const std::vector<LayerWeightSpec>& layer_weight_specs() {
    using K = WeightKind;
    using N = Need;
    static const std::vector<LayerWeightSpec> specs = {
        {"attn_norm.weight", &LayerWeights::attn_norm, K::Vector, Dim::Embd, Dim::One, N::Always},
        {"attn_q.weight", &LayerWeights::wq, K::Matrix, Dim::Embd, Dim::QWidth, N::Always},
        {"attn_k.weight", &LayerWeights::wk, K::Matrix, Dim::Embd, Dim::KVWidth, N::Always},
        {"attn_v.weight", &LayerWeights::wv, K::Matrix, Dim::Embd, Dim::KVWidth, N::Always},
        {"attn_q.bias", &LayerWeights::bq, K::Vector, Dim::QWidth, Dim::One, N::Optional},
        {"attn_k.bias", &LayerWeights::bk, K::Vector, Dim::KVWidth, Dim::One, N::Optional},
        {"attn_v.bias", &LayerWeights::bv, K::Vector, Dim::KVWidth, Dim::One, N::Optional},
        {"attn_q_norm.weight", &LayerWeights::q_norm, K::Vector, Dim::HeadDim, Dim::One, N::Optional},
        {"attn_k_norm.weight", &LayerWeights::k_norm, K::Vector, Dim::HeadDim, Dim::One, N::Optional},
        {"attn_output.weight", &LayerWeights::wo, K::Matrix, Dim::QWidth, Dim::Embd, N::Always},
        {"attn_output.bias", &LayerWeights::bo, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"attn_output_norm.weight", &LayerWeights::attn_out_norm, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"attn_output_norm.bias", &LayerWeights::attn_out_norm_b, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"post_attention_norm.weight", &LayerWeights::attn_post_norm, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"ffn_norm.weight", &LayerWeights::ffn_norm, K::Vector, Dim::Embd, Dim::One, N::Always},
        {"ffn_gate_inp.weight", &LayerWeights::ffn_gate_inp, K::Matrix, Dim::Embd, Dim::NExpert, N::Experts},
        {"ffn_gate.weight", &LayerWeights::w_gate, K::Matrix, Dim::Embd, Dim::FF, N::Dense},
        {"ffn_up.weight", &LayerWeights::w_up, K::Matrix, Dim::Embd, Dim::FF, N::Dense},
        {"ffn_up.bias", &LayerWeights::b_up, K::Vector, Dim::FF, Dim::One, N::Optional},
        {"ffn_down.weight", &LayerWeights::w_down, K::Matrix, Dim::FF, Dim::Embd, N::Dense},
        {"ffn_down.bias", &LayerWeights::b_down, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"layer_output_norm.weight", &LayerWeights::out_norm, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"layer_output_norm.bias", &LayerWeights::out_norm_b, K::Vector, Dim::Embd, Dim::One, N::Optional},
        {"post_ffw_norm.weight", &LayerWeights::ffn_post_norm, K::Vector, Dim::Embd, Dim::One, N::Optional},
    };
    return specs;
}

const std::vector<ExpertWeightSpec>& expert_weight_specs() {
    static const std::vector<ExpertWeightSpec> specs = {
        {"ffn_gate_exps.weight", &LayerWeights::gate_exps, Dim::Embd, Dim::FFExp},
        {"ffn_up_exps.weight", &LayerWeights::up_exps, Dim::Embd, Dim::FFExp},
        {"ffn_down_exps.weight", &LayerWeights::down_exps, Dim::FFExp, Dim::Embd},
    };
    return specs;
}

const std::vector<FusedWeightSpec>& fused_weight_specs() {
    static const std::vector<FusedWeightSpec> specs = {
        {"attn_qkv.weight", {{&LayerWeights::wq, Dim::QWidth, "attn_q.weight"},
                             {&LayerWeights::wk, Dim::KVWidth, "attn_k.weight"},
                             {&LayerWeights::wv, Dim::KVWidth, "attn_v.weight"}}},
        {"ffn_up.weight", {{&LayerWeights::w_gate, Dim::FF, "ffn_gate.weight"},
                           {&LayerWeights::w_up, Dim::FF, "ffn_up.weight"}}},
    };
    return specs;
}

int64_t dim_value(const HParams& hp, Dim d) {
    switch (d) {
        case Dim::One: return 1;
        case Dim::Embd: return hp.n_embd;
        case Dim::QWidth: return (int64_t)hp.n_head * hp.head_dim;
        case Dim::KVWidth: return (int64_t)hp.n_head_kv * hp.head_dim;
        case Dim::FF: return hp.n_ff;
        case Dim::HeadDim: return hp.head_dim;
        case Dim::FFExp: return hp.n_ff_exp;
        case Dim::NExpert: return hp.n_expert;
    }
    throw std::logic_error("dim_value: unknown dimension");
}

static std::string shape_string(const int64_t* ne, int n_dims) {
    std::string s = "[";
    for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// The checks of a tensor's type every weight passes, whatever its shape.
static void check_weight_type(const GGUFTensor& t, const std::string& name, WeightKind kind, int64_t ne0) {
    const TypeTraits* tt = type_traits(t.type);
    if (!tt) throw std::invalid_argument("tensor '" + name + "' has an unknown type");
    if (kind == WeightKind::Vector && t.type != GGMLType::F32)
        throw std::invalid_argument("vector tensor '" + name + "' must be F32, is " + tt->name);
    if (ne0 % tt->block_elems != 0)
        throw std::invalid_argument("tensor '" + name + "' has rows of " + std::to_string(ne0) +
                                    " elements, not a multiple of the " + tt->name + " block size " +
                                    std::to_string(tt->block_elems));
    if (kind == WeightKind::Matrix && !vec_dot_fn(t.type, Isa::Scalar))
        throw std::invalid_argument("matrix tensor '" + name + "' has type " + tt->name +
                                    ", which has no matmul kernel");
}

static WeightRef weight_ref(const GGUFTensor& t, const std::string& name, int64_t ne0, int64_t ne1) {
    const TypeTraits* tt = type_traits(t.type);
    WeightRef w;
    w.name = name;
    w.tensor = t.name;
    w.type = t.type;
    w.data = t.data;
    w.ne0 = ne0;
    w.ne1 = ne1;
    w.row_bytes = (size_t)(ne0 / tt->block_elems) * tt->block_bytes;
    return w;
}

WeightRef load_weight(const GGUFFile& f, const std::string& name, WeightKind kind, int64_t ne0, int64_t ne1,
                      bool required) {
    const GGUFTensor* t = f.tensor(name);
    if (!t) {
        if (required) throw std::invalid_argument("model file lacks tensor '" + name + "'");
        return WeightRef{};
    }
    const bool vector = kind == WeightKind::Vector;
    const int want_dims = vector ? 1 : 2;
    const int64_t want[2] = {ne0, ne1};
    if (t->n_dims != want_dims || t->ne[0] != ne0 || (!vector && t->ne[1] != ne1))
        throw std::invalid_argument("tensor '" + name + "' has shape " + shape_string(t->ne, t->n_dims) +
                                    ", expected " + shape_string(want, want_dims) +
                                    (vector ? " (a 1-D vector)" : " (a 2-D matrix)"));
    check_weight_type(*t, name, kind, ne0);
    return weight_ref(*t, name, ne0, vector ? 1 : ne1);
}

// A mixture-of-experts layer's 3-D tensors, each split into one matrix view per expert.
static void load_experts(const GGUFFile& f, const HParams& hp, const std::string& prefix, LayerWeights& L) {
    for (const ExpertWeightSpec& s : expert_weight_specs()) {
        const std::string name = prefix + s.suffix;
        const GGUFTensor* t = f.tensor(name);
        if (hp.n_expert == 0) {
            if (t) throw std::invalid_argument("tensor '" + name + "' holds experts, but the metadata's expert_count is 0");
            continue;
        }
        if (!t) throw std::invalid_argument("model file lacks tensor '" + name + "'");
        const int64_t want[3] = {dim_value(hp, s.ne0), dim_value(hp, s.ne1), hp.n_expert};
        if (t->n_dims != 3 || t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2])
            throw std::invalid_argument("tensor '" + name + "' has shape " + shape_string(t->ne, t->n_dims) +
                                        ", expected " + shape_string(want, 3) + " (a 3-D [row, rows, experts] tensor)");
        check_weight_type(*t, name, WeightKind::Matrix, want[0]);
        const WeightRef all = weight_ref(*t, name, want[0], want[1]);
        std::vector<WeightRef>& views = L.*s.member;
        views.assign((size_t)hp.n_expert, all);
        for (int e = 0; e < hp.n_expert; ++e) {
            views[e].name = name + " expert " + std::to_string(e);
            views[e].expert = e;
            views[e].n_expert = hp.n_expert;
            views[e].data = all.data + (size_t)e * (size_t)want[1] * all.row_bytes;
        }
    }
}

// blk.N.* tensors with N >= block_count: the metadata disagrees with the tensors.
static void check_layer_count(const GGUFFile& f, int n_layer) {
    for (const GGUFTensor& t : f.tensors()) {
        if (t.name.compare(0, 4, "blk.") != 0) continue;
        const size_t dot = t.name.find('.', 4);
        const std::string num = t.name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
        if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos) continue;
        if (std::stol(num) >= n_layer)
            throw std::invalid_argument("tensor '" + t.name + "' belongs to layer " + num +
                                        ", but the metadata's block_count is " + std::to_string(n_layer));
    }
}

// The fused matrices of one layer present in the file, split into row views of their parts.
static void load_fused(const GGUFFile& f, const HParams& hp, const std::string& prefix, LayerWeights& L) {
    for (const FusedWeightSpec& s : fused_weight_specs()) {
        const GGUFTensor* t = f.tensor(prefix + s.suffix);
        int64_t rows = 0;
        for (const FusedPart& p : s.parts) rows += dim_value(hp, p.rows);
        if (!t || t->n_dims != 2 || t->ne[1] != rows) continue;
        bool separate = false;
        for (const FusedPart& p : s.parts)
            separate = separate || (std::string(p.own_suffix) != s.suffix && f.tensor(prefix + p.own_suffix));
        if (separate)
            throw std::invalid_argument("layer tensors '" + prefix + s.suffix + "' (fused) and its parts' own "
                                        "tensors are both present");
        const WeightRef fused = load_weight(f, prefix + s.suffix, WeightKind::Matrix, hp.n_embd, rows, true);
        int64_t r0 = 0;
        for (const FusedPart& p : s.parts) {
            const int64_t n = dim_value(hp, p.rows);
            WeightRef& v = L.*p.member;
            v = fused;
            v.name = fused.name + " rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) + ")";
            v.data = fused.data + (size_t)r0 * fused.row_bytes;
            v.ne1 = n;
            r0 += n;
        }
    }
}

void load_layer_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w, bool all_optional) {
    check_layer_count(f, hp.n_layer);
    w.layers.assign(hp.n_layer, LayerWeights{});
    for (int il = 0; il < hp.n_layer; ++il) {
        const std::string prefix = "blk." + std::to_string(il) + ".";
        LayerWeights& L = w.layers[il];
        load_fused(f, hp, prefix, L);
        for (const LayerWeightSpec& s : layer_weight_specs()) {
            const bool moe = hp.n_expert > 0;
            const bool needed = s.need == Need::Always || (s.need == Need::Dense && !moe) ||
                                (s.need == Need::Experts && moe);
            if (!needed && s.need != Need::Optional) continue;   // the other kind of FFN's tensor
            if (!(L.*s.member).present())
                L.*s.member = load_weight(f, prefix + s.suffix, s.kind, dim_value(hp, s.ne0), dim_value(hp, s.ne1),
                                          needed && !all_optional);
        }
        load_experts(f, hp, prefix, L);
    }
}

void load_model_weights(const GGUFFile& f, const HParams& hp, ModelWeights& w) {
    const int64_t D = hp.n_embd;
    w.tok_embd = load_weight(f, "token_embd.weight", WeightKind::Matrix, D, hp.n_vocab, true);
    w.output_norm = load_weight(f, "output_norm.weight", WeightKind::Vector, D, 1, true);
    w.output = load_weight(f, "output.weight", WeightKind::Matrix, D, hp.n_vocab, false);
    if (!w.output.present()) w.output = w.tok_embd;   // tied embeddings
    load_layer_weights(f, hp, w, false);
}

static std::vector<WeightRef*> of_kind(LayerWeights& L, WeightKind kind) {
    std::vector<WeightRef*> out;
    for (const LayerWeightSpec& s : layer_weight_specs())
        if (s.kind == kind) out.push_back(&(L.*s.member));
    if (kind == WeightKind::Matrix)
        for (size_t e = 0; e < L.gate_exps.size(); ++e)
            for (const ExpertWeightSpec& s : expert_weight_specs()) out.push_back(&(L.*s.member)[e]);
    return out;
}

std::vector<WeightRef*> layer_matrices(LayerWeights& L) { return of_kind(L, WeightKind::Matrix); }
std::vector<WeightRef*> layer_vectors(LayerWeights& L) { return of_kind(L, WeightKind::Vector); }

LayerPlacement place_layers(int n_layer, int n_gpu_layers, Placement offload) {
    if (n_gpu_layers < 0 || n_gpu_layers > n_layer)
        throw std::invalid_argument("n_gpu_layers = " + std::to_string(n_gpu_layers) + " is out of range [0, " +
                                    std::to_string(n_layer) + "]");
    if (n_gpu_layers == 0) offload = kHostPlacement;
    else if (backend_info(offload).host)
        throw std::invalid_argument("n_gpu_layers = " + std::to_string(n_gpu_layers) + " needs a device to offload to");
    LayerPlacement lp;
    for (int il = 0; il < n_layer; ++il)
        lp.layers.push_back(il >= n_layer - n_gpu_layers ? offload : kHostPlacement);
    lp.output = offload;
    return lp;
}

std::vector<Placement> placements_used(const LayerPlacement& lp) {
    std::vector<Placement> used{kHostPlacement};
    auto add = [&](Placement p) {
        for (Placement u : used)
            if (u == p) return;
        used.push_back(p);
    };
    for (Placement p : lp.layers) add(p);
    add(lp.output);
    return used;
}

PlacedWeights weights_on(ModelWeights& w, const LayerPlacement& lp, Placement p) {
    PlacedWeights pw;
    if (lp.output == p) pw.vectors.push_back(&w.output_norm);
    for (size_t il = 0; il < lp.layers.size(); ++il) {
        if (lp.layers[il] != p) continue;
        ++pw.n_layers;
        for (WeightRef* m : layer_matrices(w.layers[il])) pw.matrices.push_back(m);
        for (WeightRef* v : layer_vectors(w.layers[il])) pw.vectors.push_back(v);
    }
    if (lp.output == p && w.output.present()) pw.matrices.push_back(&w.output);
    return pw;
}

}  // namespace lll
