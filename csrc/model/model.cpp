// model.cpp — loading a model from GGUF, placing each layer on a backend, and the shared
// skeleton of the forward pass.
#include "model/model.h"
#include <math.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <stdexcept>
#include "backends/registry.h"
#include "model/weights.h"

namespace lll {

const ArchSpec* describe_model(const GGUFFile& f, HParams& hp, ModelWeights& w) {
    const std::string arch = f.get_string("general.architecture");
    const ArchSpec* spec = find_arch(arch);
    if (!spec)
        throw std::invalid_argument("unsupported architecture '" + arch + "' (supported: " +
                                    supported_archs() + ")");
    hp.arch = arch;
    spec->load_hparams(f, hp);
    spec->load_weights(f, hp, w);
    return spec;
}

int gpu_layers_max(const HParams& hp) {
    const ArchSpec* spec = find_arch(hp.arch);
    return hp.n_expert > 0 || (spec && spec->bidirectional) ? 0 : hp.n_layer;
}

Model::Model(const std::string& path, int n_threads, int64_t kv_blocks, int kv_block_size, Numerics numerics,
             int n_gpu_layers, KVTypes kv_types, int64_t n_ctx_seq, Placement offload)
    : path_(path), numerics_(numerics) {
    file_ = GGUFFile::open(path);
    arch_ = describe_model(*file_, hp_, w_);
    if (n_ctx_seq < 0) throw std::invalid_argument("n_ctx must be >= 0");
    hp_.select_context(n_ctx_seq > 0 ? n_ctx_seq : kv_blocks * (int64_t)kv_block_size);
    if (n_threads < 1) throw std::invalid_argument("n_threads must be >= 1");
    check_kv_types(kv_types, hp_.head_dim);
    // The quantized cache is read by the fast attention only: llama.cpp numerics reproduce its
    // f16-cache attention.
    const bool quantized_kv = kv_types.k != GGMLType::F16 || kv_types.v != GGMLType::F16;
    const std::string kv_name = std::string(cache_type_name(kv_types.k)) + "/" + cache_type_name(kv_types.v);
    if (quantized_kv && numerics == Numerics::LlamaCpp)
        throw std::invalid_argument("a " + kv_name + " KV cache runs with the fast numerics only; use an f16 cache "
                                    "with numerics=llama.cpp");
    if (gpu_layers_max(hp_) < hp_.n_layer && n_gpu_layers > gpu_layers_max(hp_))
        throw std::invalid_argument(std::string(arch_->bidirectional ? "encoder" : "mixture-of-experts") + " models (" +
                                    hp_.arch + ") run on the CPU only in this version; use n_gpu_layers = 0");
    placement_ = place_layers(hp_.n_layer, n_gpu_layers, offload);
    pool_ = std::make_unique<ThreadPool>(n_threads);
    isa_ = best_isa();
    const BackendConfig cfg{&hp_, pool_.get(), isa_, numerics_, kHostPlacement};
    for (Placement p : placements_used(placement_)) backends_.push_back(make_backend(p, cfg));
    for (Placement p : placement_.layers) layer_backend_.push_back(&backend_at(p));
    for (const Backend* b : layer_backend_)   // each layer's KV lives on its backend
        if (quantized_kv && !backend_info(b->placement()).quantized_kv)
            throw std::invalid_argument("a " + kv_name + " KV cache does not run on " + placement_spec(b->placement()) +
                                        " (its attention reads f16); use an f16 cache or n_gpu_layers = 0");
    output_backend_ = &backend_at(placement_.output);
    place_weights();
    kv_ = std::make_unique<KVCache>(layer_backend_, kv_blocks, kv_block_size, hp_.n_head_kv, hp_.head_dim, kv_types);
}

Backend& Model::backend_at(Placement p) const {
    for (const auto& b : backends_)
        if (b->placement() == p) return *b;
    throw std::logic_error(std::string("no backend for ") + placement_name(p));
}

std::vector<Backend*> Model::backends() const {
    std::vector<Backend*> all;
    for (const auto& b : backends_) all.push_back(b.get());
    return all;
}

// Each backend takes the weights of its layers (and the output head), in the order a token uses
// them, which is also their order in a CPU's repacked arena: a kernel's prefetch past the end
// of one matrix then warms the start of the next.
void Model::place_weights() {
    embd_.rows = w_.tok_embd;
    for (const auto& be : backends_) {
        const PlacedWeights pw = weights_on(w_, placement_, be->placement());
        for (WeightRef* w : pw.matrices) w->placement = be->placement();
        for (WeightRef* w : pw.vectors) w->placement = be->placement();
        be->place_weights(pw.matrices, pw.vectors);
    }
    // When the CPU repacked the tied output matrix or released file pages, token rows are read
    // with pread: through the mapping, each lookup of a scattered row maps a whole page-cache
    // folio (about 1 MB here), and a long prompt would pull back into memory the table that
    // repacking released (it is the output matrix when tied).
    bool released = w_.output.repacked;
    for (LayerWeights& L : w_.layers)
        for (const WeightRef* w : layer_matrices(L)) released = released || w->repacked;
    const GGUFTensor* emb = file_->tensor("token_embd.weight");
    if (!released || !emb) return;
    embd_.fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (embd_.fd < 0) return;
    embd_.file_offset = emb->file_offset;
    const long page = sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)emb->data + page - 1) / page * page;
    const uintptr_t hi = ((uintptr_t)emb->data + emb->nbytes) / page * page;
    if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
}

Model::~Model() {
    if (embd_.fd >= 0) close(embd_.fd);
}

void Model::collect_activations(bool on) {
    std::unique_ptr<ActivationStats> stats = on ? std::make_unique<ActivationStats>() : nullptr;
    for (const auto& be : backends_) {
        if (be->observe_activations(stats.get())) continue;
        for (const auto& b : backends_) b->observe_activations(nullptr);
        activation_stats_.reset();
        throw std::invalid_argument(std::string("collecting activation statistics needs every layer on a backend "
                                                "that can observe its matmuls; ") + be->name() + " cannot (run "
                                                "with no GPU layers)");
    }
    activation_stats_ = std::move(stats);
}

void Model::reserve(int64_t T) {
    for (const auto& be : backends_) be->reserve(T);
}

// x[n] of one backend's scratch into the next's, through the host when neither is the CPU.
void Model::move_activations(Backend& from, Backend& to, int64_t n) {
    const size_t bytes = (size_t)n * sizeof(float);
    Backend& cpu = *backends_[0];
    if (&from == &cpu) {
        to.from_host(to.scratch().x, from.scratch().x, bytes);
    } else if (&to == &cpu) {
        from.to_host(to.scratch().x, from.scratch().x, bytes);
    } else {
        from.to_host(cpu.scratch().x, from.scratch().x, bytes);
        to.from_host(to.scratch().x, cpu.scratch().x, bytes);
    }
}

Backend* Model::run_layers(const Batch& b) {
    const int64_t T = b.n_tokens, D = hp_.n_embd;
    reserve(std::max<int64_t>(T, b.n_out));
    for (const auto& be : backends_) be->begin_batch(b);
    const Batch* attn_view = arch_->bidirectional ? &bidirectional_view(b) : nullptr;
    Backend* cur = backends_[0].get();                       // the input embedding is on the CPU
    float* x = cur->scratch().x;                             // [T, D] residual stream
    cur->embed(embd_, b.tokens, T, x);
    if (hp_.embd_scale != 1.0f) cur->scale(x, hp_.embd_scale, T * D);
    if (arch_->input_forward) arch_->input_forward(*cur, hp_, w_, b, x, T);
    for (int il = 0; il < hp_.n_layer; ++il) {
        Backend& be = *layer_backend_[il];
        if (&be != cur) move_activations(*cur, be, T * D);  // once per change of backend
        cur = &be;
        arch_->layer_forward(LayerCtx{be, hp_, w_.layers[il], *kv_, il, b, attn_view}, be.scratch().x, T);
    }
    if (output_backend_ != cur) move_activations(*cur, *output_backend_, T * D);
    return output_backend_;
}

// A bidirectional model's sequences come whole, from position 0, in one batch: the keys each
// token sees are then exactly its sequence's tokens of this batch. Every token is placed at its
// sequence's last position (positions of a sequence may repeat in attention), so a sequence's
// tokens stay one run that attention cuts into chunks of many rows; as one-token sequences each
// row was a chunk of its own, whose setup cost ten times its multiply-adds (MiniLM, 13 tokens).
const Batch& Model::bidirectional_view(const Batch& b) {
    AttnView& v = view_;
    const int64_t T = b.n_tokens;
    v.positions.resize((size_t)T);
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && b.seq_of_token[t1] == b.seq_of_token[t0]) ++t1;
        for (int64_t t = t0; t < t1; ++t)
            if (b.positions[t] != t - t0)
                throw std::invalid_argument(hp_.arch + " attends both ways: each sequence must be given whole in "
                                            "one batch, at positions 0, 1, 2, ... (token " + std::to_string(t) +
                                            " has position " + std::to_string(b.positions[t]) + ")");
        std::fill(v.positions.begin() + t0, v.positions.begin() + t1, (int32_t)(t1 - 1 - t0));
        t0 = t1;
    }
    v.batch = b;
    v.batch.positions = v.positions.data();
    return v.batch;
}

void Model::forward(const Batch& b, float* logits) { forward_mixed(b, logits, nullptr, 0, nullptr); }

void Model::forward_mixed(const Batch& b, float* logits, const int32_t* hidden_rows, int64_t n_hidden, float* hidden) {
    if (!has_output_head())
        throw std::invalid_argument(hp_.arch + " is an encoder-only model: it has no output head to generate "
                                    "tokens with (use it for embeddings)");
    Backend* out = run_layers(b);
    if (n_hidden > 0) copy_hidden(*out, b, hidden_rows, n_hidden, hidden);   // before the head reuses scratch h
    if (b.n_out > 0) out->output_head(out->scratch().x, b, w_.output_norm, hp_.norm_eps, w_.output, logits);
    out->sync();
    if (hp_.final_softcap > 0.0f)   // llama.cpp's order: scale by 1/cap, tanh, scale by cap
        for (int64_t i = 0; i < b.n_out * (int64_t)hp_.n_vocab; ++i)
            logits[i] = tanhf(logits[i] * (1.0f / hp_.final_softcap)) * hp_.final_softcap;
}

void Model::forward_hidden(const Batch& b, float* out) {
    Backend* be = run_layers(b);
    copy_hidden(*be, b, b.output_rows, b.n_out, out);
}

void Model::copy_hidden(Backend& be, const Batch& b, const int32_t* rows, int64_t n, float* out) {
    const int64_t T = b.n_tokens, D = hp_.n_embd;
    const float* x = be.scratch().x;
    if (w_.output_norm.present()) {
        be.rms_norm(x, w_.output_norm, be.scratch().h, T, D, hp_.norm_eps);
        x = be.scratch().h;
    }
    for (int64_t r = 0; r < n; ++r) be.to_host(out + r * D, x + (int64_t)rows[r] * D, (size_t)D * sizeof(float));
    be.sync();
}

}  // namespace lll
