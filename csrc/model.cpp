// model.cpp — loading a model from GGUF and the shared skeleton of the forward pass.
#include "model.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <stdexcept>
#include "matmul.h"
#include "quants/ggml_order.h"
#include "ops.h"
#include "models/layer_blocks.h"

namespace lll {

Model::Model(const std::string& path, int n_threads, int64_t kv_blocks, int kv_block_size, Numerics numerics)
    : path_(path), numerics_(numerics) {
    file_ = GGUFFile::open(path);
    const std::string arch = file_->get_string("general.architecture");
    arch_ = find_arch(arch);
    if (!arch_)
        throw std::invalid_argument("unsupported architecture '" + arch + "' (supported: " +
                                    supported_archs() + ")");
    hp_.arch = arch;
    arch_->load_hparams(*file_, hp_);
    arch_->load_weights(*this, w_);
    if (n_threads < 1) throw std::invalid_argument("n_threads must be >= 1");
    pool_ = std::make_unique<ThreadPool>(n_threads);
    kv_ = std::make_unique<KVCache>(hp_.n_layer, kv_blocks, kv_block_size,
                                    (int64_t)hp_.n_head_kv * hp_.head_dim);
    isa_ = best_isa();
    const char* no_repack = getenv("LOCALLLM_NO_REPACK");
    if (!(no_repack && *no_repack && *no_repack != '0')) repack_layer_weights();
}

bool Model::llamacpp_kernel(const WeightRef& w) const {
    return numerics_ == Numerics::LlamaCpp && ggml_order::supported(w.type, w.ne1);
}

// The matrices of block-sequential types are repacked into 16-row panels (same size), and the
// file pages they came from are dropped from memory: peak RSS stays that of the weights. With
// tied embeddings the output matrix is also the lookup table: that keeps reading the file's
// rows, and faults back in only the pages of the tokens it looks up.
void Model::repack_layer_weights() {
    const long page = sysconf(_SC_PAGESIZE);
    const std::vector<WeightRef*> todo = matrices();
    std::vector<WeightRef*> chosen;
    std::vector<size_t> offset;
    size_t total = 0;
    for (WeightRef* w : todo) {
        if (!w->present() || !can_repack(w->type, isa_)) continue;
        if (llamacpp_kernel(*w)) continue;   // those kernels read the GGUF rows
        chosen.push_back(w);
        offset.push_back(total);
        total += (repacked_bytes(w->type, w->ne1, w->ne0) + 63) / 64 * 64;
    }
    if (chosen.empty()) return;
    copy_vector_weights();
    // Token lookups then read their rows with pread: through the mapping, each lookup of a
    // scattered row maps a whole page-cache folio (about 1 MB here), and a long prompt would pull
    // back into memory the table that repacking released (it is the output matrix when tied).
    const GGUFTensor* emb = file_->tensor("token_embd.weight");
    embd_fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (emb && embd_fd_ >= 0) {
        embd_offset_ = emb->file_offset;
        const uintptr_t lo = ((uintptr_t)emb->data + page - 1) / page * page;
        const uintptr_t hi = ((uintptr_t)emb->data + emb->nbytes) / page * page;
        if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
    }
    repacked_ = std::make_unique<HugeBuffer>(total);
    // Slices of rows, each released from memory as soon as it is repacked: the old and new copies
    // of a large matrix (a 170 MB tied embedding) never sit in memory together.
    constexpr int64_t kSliceRows = 8192;
    for (size_t i = 0; i < chosen.size(); ++i) {
        WeightRef* w = chosen[i];
        uint8_t* dst = repacked_->data() + offset[i];
        for (int64_t r0 = 0; r0 < w->ne1; r0 += kSliceRows) {
            const int64_t rows = std::min(kSliceRows, w->ne1 - r0);
            const uint8_t* src = w->data + r0 * w->row_bytes;
            repack_weight(*pool_, w->type, src, rows, w->ne0, dst + r0 * w->row_bytes);
            const uintptr_t lo = ((uintptr_t)src + page - 1) / page * page;
            const uintptr_t hi = ((uintptr_t)src + rows * w->row_bytes) / page * page;
            if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
        }
        w->data = dst;
        w->repacked = true;
    }
}

const float* Model::rope_cs(const int32_t* positions, int64_t T, float base) {
    for (RopeCache& c : rope_cache_)
        if (c.base == base && (int64_t)c.positions.size() == T &&
            std::equal(positions, positions + T, c.positions.begin()))
            return c.cs.data();
    RopeCache& c = rope_cache_[rope_cache_next_];
    rope_cache_next_ = (rope_cache_next_ + 1) % 2;
    c.base = base;
    c.positions.assign(positions, positions + T);
    c.cs.resize((size_t)(T * hp_.rope_dims));
    rope_table(positions, T, hp_.rope_dims, base, c.cs.data());
    return c.cs.data();
}

// In the order a token uses them, which is also their order in the repacked arena: a kernel's
// prefetch past the end of one matrix then warms the start of the next.
std::vector<WeightRef*> Model::matrices() {
    std::vector<WeightRef*> all;
    for (LayerWeights& L : w_.layers)
        for (WeightRef* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) all.push_back(w);
    all.push_back(&w_.output);
    return all;
}

// Norm weights and biases are copied out of the mapping once their neighbours' file pages are
// dropped: touching one would map back the whole page-cache folio around it (24 MB of RSS over
// SmolLM2's 61 norm vectors in one forward). They are a few hundred KB in all.
void Model::copy_vector_weights() {
    std::vector<WeightRef*> vecs{&w_.output_norm};
    for (LayerWeights& L : w_.layers)
        for (WeightRef* w : {&L.attn_norm, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm,
                             &L.attn_post_norm, &L.ffn_norm, &L.ffn_post_norm})
            vecs.push_back(w);
    size_t total = 0;   // floats
    for (const WeightRef* w : vecs)
        if (w->present()) total += (size_t)(w->ne0 * w->ne1);
    vector_copies_.resize(total);
    float* dst = vector_copies_.data();
    for (WeightRef* w : vecs) {
        if (!w->present()) continue;
        const size_t n = (size_t)(w->ne0 * w->ne1);
        memcpy(dst, w->data, n * sizeof(float));   // weight() checked: vectors are F32
        w->data = reinterpret_cast<const uint8_t*>(dst);
        dst += n;
    }
}

WeightRef Model::weight(const std::string& name, int64_t ne0, int64_t ne1, bool required) const {
    const GGUFTensor* t = file_->tensor(name);
    if (!t) {
        if (required) throw std::invalid_argument("model file lacks tensor '" + name + "'");
        return WeightRef{};
    }
    const int64_t t_ne1 = t->n_dims >= 2 ? t->ne[1] : 1;
    if (t->ne[0] != ne0 || t_ne1 != ne1 || t->n_dims > 2)
        throw std::invalid_argument("tensor '" + name + "' has shape [" + std::to_string(t->ne[0]) +
                                    ", " + std::to_string(t_ne1) + "], expected [" + std::to_string(ne0) +
                                    ", " + std::to_string(ne1) + "]");
    const TypeTraits* tt = type_traits(t->type);
    WeightRef w;
    w.name = name;
    w.type = t->type;
    w.data = t->data;
    w.ne0 = ne0;
    w.ne1 = ne1;
    w.row_bytes = (size_t)(ne0 / tt->block_elems) * tt->block_bytes;
    if (ne1 == 1 && w.type != GGMLType::F32 && ne0 > 0 && t->n_dims == 1)
        throw std::invalid_argument("vector tensor '" + name + "' must be F32, is " + tt->name);
    return w;
}

Model::~Model() {
    if (embd_fd_ >= 0) close(embd_fd_);
}

void Model::embed_tokens_pread(const int32_t* tokens, int64_t T, float* out) {
    const WeightRef& e = w_.tok_embd;
    std::vector<uint8_t> row(e.row_bytes);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t id = tokens[t];
        if (id < 0 || id >= e.ne1)
            throw std::out_of_range("token id " + std::to_string(id) + " out of range [0, " + std::to_string(e.ne1) + ")");
        const off_t at = (off_t)(embd_offset_ + (uint64_t)id * e.row_bytes);
        for (size_t done = 0; done < e.row_bytes;) {
            const ssize_t n = pread(embd_fd_, row.data() + done, e.row_bytes - done, at + (off_t)done);
            if (n <= 0) throw std::runtime_error("reading token_embd.weight row " + std::to_string(id) + " failed");
            done += (size_t)n;
        }
        dequantize_row(e.type, row.data(), out + t * e.ne0, e.ne0);
    }
}

void Model::reserve_scratch(int64_t T) {
    if (T <= scratch_T_) return;
    const int64_t q_width = (int64_t)hp_.n_head * hp_.head_dim;
    const int64_t kv_width = (int64_t)hp_.n_head_kv * hp_.head_dim;
    const int64_t widest = std::max<int64_t>({hp_.n_embd, q_width, hp_.n_ff});
    s.x.resize(T * hp_.n_embd);
    s.h.resize(T * hp_.n_embd);
    s.q.resize(T * q_width);
    s.k.resize(T * kv_width);
    s.v.resize(T * kv_width);
    s.attn.resize(T * q_width);
    s.gate.resize(T * hp_.n_ff);
    s.up.resize(T * hp_.n_ff);
    s.tmp.resize(T * hp_.n_embd);
    // Room for the activation formats this model's matrices use (not every format: f32's is
    // 4x Q8's, and a resized vector touches every page): widths rounded up to the largest
    // block (Q8_K's 256), since a model's widest row need not be a multiple of every block.
    const int64_t widest_blocks = (widest + QK_K - 1) / QK_K * QK_K;
    size_t xq = 0;
    for (const WeightRef* w : matrices())
        if (w->present())
            xq = std::max(xq, act_buffer_bytes(type_traits(w->type)->vec_dot_type, T, widest_blocks));
    s.xq.resize(xq);
    scratch_T_ = T;
}

void Model::forward(const Batch& b, float* logits) {
    const int64_t T = b.n_tokens, D = hp_.n_embd;
    reserve_scratch(std::max<int64_t>(T, b.n_out));
    float* x = s.x.data();                                   // [T, D] residual stream
    if (embd_fd_ >= 0) embed_tokens_pread(b.tokens, T, x);
    else embed_tokens(w_.tok_embd, b.tokens, T, x);
    if (hp_.embd_scale != 1.0f) scale_inplace(x, hp_.embd_scale, T * D);
    for (int il = 0; il < hp_.n_layer; ++il) arch_->layer_forward(*this, il, x, T, b);
    float* h = s.h.data();                                   // [n_out, D] rows wanted
    for (int64_t r = 0; r < b.n_out; ++r)
        rms_norm(x + (int64_t)b.output_rows[r] * D, w_.output_norm.f32(), h + r * D, D, hp_.norm_eps);
    const WeightRef& out = w_.output;                        // logits [n_out, n_vocab]
    if (out.repacked || llamacpp_kernel(out)) linear(*this, out, h, b.n_out, logits, nullptr);
    else matmul(*pool_, out.type, out.data, out.ne1, out.ne0, h, b.n_out, logits, isa_);
}

}  // namespace lll
