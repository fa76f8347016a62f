// backend_vulkan.cpp — the Vulkan backend: backend.h's ops on the kernels of vulkan/shaders/
// through vk_ops.h. Compiled only where CMake defines LOCALLLM_HAVE_VULKAN (register.cpp).
//
// Pointers are addresses of vk_device_memory.h's table (each names a buffer and an offset).
// Every buffer is sized by footprint_vulkan.h's rule; each ActScratch field is a buffer of its
// own, so each op binds whole buffers. Ops are recorded into one command buffer, submitted when
// the host needs a result (to_host, sync, uploads). Rope angle tables are made on the host by the
// CPU's rope_table and uploaded, so every RoPE scaling the CPU knows runs here unchanged.
// Sampling stays on the CPU: output_head copies the wanted logits rows back.
#ifdef LOCALLLM_HAVE_VULKAN
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/ops.h"
#include "backends/vulkan/footprint_vulkan.h"
#include "backends/vulkan/vk_device_memory.h"
#include "backends/vulkan/vk_ops.h"
#include "common/blocks.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace lll {

int vulkan_device_for_placement(Placement p);   // register.cpp

namespace {

using vk::DeviceMemory;

uint32_t u32(int64_t v, const char* what) {
    if (v < 0 || v > (int64_t)UINT32_MAX) throw std::length_error(std::string("Vulkan backend: ") + what + " out of range");
    return (uint32_t)v;
}

// An op's estimated work when it is memory traffic only (elementwise ops, norms, copies): its
// bytes read and written, as vk::slow_gpu_seconds counts them.
double traffic(double bytes) { return vk::slow_gpu_seconds(0.0, bytes); }

// The (cos, sin) table rope() made for the current batch from one set of frequencies.
struct RopeTable {
    RopeFreqs freqs;
    int dims = 0;
    bool valid = false;
};

class VulkanBackend : public Backend {
public:
    explicit VulkanBackend(const BackendConfig& cfg)
        : Backend(cfg.placement), hp_(cfg.hp),
          mem_(std::make_shared<DeviceMemory>(vulkan_device_for_placement(cfg.placement))) {}
    ~VulkanBackend() override {
        try {
            mem_->flush();
        } catch (...) {   // a lost device: its buffers go regardless
        }
    }

    void copy(void* dst, const void* src, size_t n) override {
        uint64_t so = 0, d_off = 0;
        vk::Buffer& s = mem_->find(src, &so, "copy source");
        vk::Buffer& d = mem_->find(dst, &d_off, "copy destination");
        mem_->record(0, traffic(2.0 * (double)n));
        mem_->ctx().copy(s, so, d, d_off, n);
    }
    void to_host(void* host_dst, const void* src, size_t n) override {
        uint64_t off = 0;
        const vk::Buffer& s = mem_->find(src, &off, "to_host source");
        mem_->download(s, off, host_dst, n);
    }
    void from_host(void* dst, const void* host_src, size_t n) override {
        uint64_t off = 0;
        vk::Buffer& d = mem_->find(dst, &off, "from_host destination");
        mem_->upload(d, off, host_src, n);
    }
    void sync() override { mem_->flush(); }

    void place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) override;
    void reserve(int64_t T) override;
    void begin_batch(const Batch& b) override;

    void linear_group(const LinearOut* outs, int n, const float* x, int64_t T) override;
    void rms_norm(const float* x, const WeightRef& w, float* y, int64_t rows, int64_t n, float eps) override {
        vk::Buffer& bw = buf(w.data, "rms_norm weight");
        mem_->record(1, traffic(8.0 * (double)rows * (double)n));
        vk::op_rms_norm(mem_->ctx(), buf(x, "rms_norm input"), &bw, buf(y, "rms_norm output"), u32(rows, "rows"),
                        u32(n, "row width"), eps);
    }
    void rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const RopeFreqs& f,
              RopeStyle style) override;
    void scale(float* x, float s, int64_t n) override {
        vk::Buffer& b = buf(x, "scale input");
        mem_->record(1, traffic(8.0 * (double)n));
        vk::op_scale(mem_->ctx(), b, b, u32(n, "scale length"), s);
    }
    void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b) override {
        const vk::KVLayerView view = kv_layer(kv, layer);
        mem_->record(1, traffic(16.0 * (double)b.n_tokens * (double)kv.kv_width()));
        vk::op_kv_write(mem_->ctx(), view, buf(k, "keys"), buf(v, "values"), batch_view(b), (uint32_t)kv.n_head_kv());
    }
    void attention(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                   const AttnParams& p) override;
    void glu(const float* gate, const float* up, float* out, int64_t n, FFNAct act) override {
        mem_->record(1, traffic(12.0 * (double)n));
        vk::op_glu(mem_->ctx(), act == FFNAct::SiLU ? vk::Glu::SiLU : vk::Glu::GELU, buf(gate, "glu gate"),
                   buf(up, "glu up"), buf(out, "glu output"), u32(n, "glu length"));
    }
    void add(float* y, const float* x, int64_t n) override {
        vk::Buffer& by = buf(y, "add output");
        mem_->record(1, traffic(12.0 * (double)n));
        vk::op_add(mem_->ctx(), by, buf(x, "add input"), by, u32(n, "add length"), u32(n, "add length"));
    }
    void embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) override;
    void output_head(const float* x, const Batch& b, const WeightRef& norm, float eps, const WeightRef& out,
                     float* logits_host) override;

    size_t device_memory() const override { return mem_->ctx().device_bytes(); }

protected:
    std::unique_ptr<Buffer> alloc_raw(size_t bytes, MemKind kind) override {
        try {
            return std::make_unique<vk::DeviceBuffer>(mem_, bytes, mem_kind_name(kind));
        } catch (const std::length_error&) {
            throw;   // over the one-buffer limit: the message names the sizes
        } catch (const std::runtime_error&) {
            return nullptr;   // the device's memory is exhausted: Backend::alloc names the request
        }
    }

private:
    vk::Buffer& buf(const void* p, const char* what) { return mem_->whole(p, what); }
    bool matvec_chunks(const LinearOut* outs, int n, int64_t T) const;
    std::unique_ptr<Buffer> alloc_checked(size_t bytes, MemKind kind, const std::string& what);
    vk::KVLayerView kv_layer(const KVCache& kv, int layer);
    vk::BatchView batch_view(const Batch& b) {
        return vk::BatchView{&buf(positions_, "positions"), &buf(seq_of_token_, "sequence ids"),
                             &buf(block_tables_->data(), "block tables"), u32(b.n_tokens, "batch size"),
                             u32(table_width_, "block table width")};
    }

    const HParams* hp_;
    std::shared_ptr<DeviceMemory> mem_;
    std::vector<std::unique_ptr<Buffer>> weights_;          // one buffer per weight (or per row window)
    // A matrix over one buffer's limit is held as row windows, each its own buffer; keyed by the
    // address its WeightRef points at (the first window's).
    struct RowWindow {
        const void* data;
        int64_t row0, rows;
    };
    std::map<const void*, std::vector<RowWindow>> windows_;
    void place_in_windows(WeightRef* w);
    std::vector<RowWindow> pieces(const WeightRef& w) const;   // its row windows, or the whole matrix
    void linear_rows(const WeightRef& w, vk::Buffer& bx, vk::Buffer& by, uint32_t t0, uint32_t rows,
                     std::optional<vk::Q8Input>& q8);
    std::vector<std::unique_ptr<Buffer>> act_;              // one buffer per ActScratch field
    std::unique_ptr<Buffer> logits_, tokens_buf_, positions_buf_, seq_buf_, rope_cs_[2], block_tables_;
    void *positions_ = nullptr, *seq_of_token_ = nullptr;
    int64_t scratch_T_ = 0;
    std::vector<int32_t> host_positions_;                   // the batch's, for the rope tables
    std::vector<int32_t> padded_tables_;                    // the batch's block tables, table_width_ wide
    int64_t table_width_ = 0;
    RopeTable rope_[2];
};

// Each buffer is at most the device's one-buffer limit; a larger tensor is an error naming it.
std::unique_ptr<Buffer> VulkanBackend::alloc_checked(size_t bytes, MemKind kind, const std::string& what) {
    const uint64_t limit = mem_->ctx().max_buffer_bytes();
    if (bytes > limit)
        throw std::length_error("Vulkan backend: " + what + " needs one buffer of " + std::to_string(bytes) +
                                " bytes, over the " + std::to_string(limit) + "-byte limit of one buffer on " +
                                mem_->ctx().info().name + ": run it on the CPU (lower -ngl)");
    return alloc(bytes, kind, what);
}

void VulkanBackend::place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) {
    for (const WeightRef* w : matrices)
        if (w->present() && w->ne1 > 1 && !vk::vulkan_supports_type((uint32_t)w->type))
            throw std::invalid_argument("Vulkan backend: no kernel for " + w->name + "'s type (" +
                                        ggml_type_name((uint32_t)w->type) + "): run it on the CPU (lower -ngl)");
    for (const WeightRef* w : vectors)
        if (w->present() && w->type != GGMLType::F32)
            throw std::invalid_argument("Vulkan backend: vector " + w->name + " must be F32");
    std::vector<WeightRef*> all(matrices.begin(), matrices.end());
    all.insert(all.end(), vectors.begin(), vectors.end());
    for (WeightRef* w : all) {
        if (!w->present()) continue;
        if (w->repacked) throw std::logic_error("Vulkan backend: " + w->name + " was repacked for the CPU");
        if (w->bytes() > mem_->ctx().max_buffer_bytes() && w->ne1 > 1) {
            place_in_windows(w);
            continue;
        }
        std::unique_ptr<Buffer> b = alloc_checked(w->bytes(), MemKind::Weights, w->name);
        from_host(b->data(), w->data, w->bytes());   // synchronous: the source may be released next
        w->data = b->data();
        weights_.push_back(std::move(b));
    }
}

// Rows [row0, row0 + rows) of the matrix in one buffer each, as many rows as one buffer holds.
void VulkanBackend::place_in_windows(WeightRef* w) {
    const int64_t per = (int64_t)(mem_->ctx().max_buffer_bytes() / w->row_bytes);
    if (per < 1) alloc_checked(w->row_bytes, MemKind::Weights, w->name + " (one row)");   // the error naming it
    std::vector<RowWindow> ws;
    for (int64_t r0 = 0; r0 < w->ne1; r0 += per) {
        const int64_t rows = std::min(per, w->ne1 - r0);
        std::unique_ptr<Buffer> b = alloc_checked((size_t)rows * w->row_bytes, MemKind::Weights,
                                                  w->name + " rows " + std::to_string(r0) + "+" + std::to_string(rows));
        from_host(b->data(), w->data + (size_t)r0 * w->row_bytes, (size_t)rows * w->row_bytes);
        ws.push_back(RowWindow{b->data(), r0, rows});
        weights_.push_back(std::move(b));
    }
    w->data = static_cast<const uint8_t*>(ws.front().data);
    windows_[ws.front().data] = std::move(ws);
}

// One buffer per field, in layout_act_scratch's order and widths (their sum is act_scratch_floats).
void VulkanBackend::reserve(int64_t T) {
    if (T <= scratch_T_) return;
    const HParams& hp = *hp_;
    const int64_t q_width = (int64_t)hp.n_head * hp.head_dim, kv_width = (int64_t)hp.n_head_kv * hp.head_dim;
    std::vector<std::unique_ptr<Buffer>> act;
    ActScratch s;
    auto take = [&](int64_t width, const char* what) {
        act.push_back(alloc_checked((size_t)(T * width) * sizeof(float), MemKind::Scratch, what));
        return reinterpret_cast<float*>(act.back()->data());
    };
    s.x = take(hp.n_embd, "activations x"), s.h = take(hp.n_embd, "activations h");
    s.tmp = take(hp.n_embd, "activations tmp");
    s.q = take(q_width, "activations q"), s.attn = take(q_width, "activations attn");
    s.k = take(kv_width, "activations k"), s.v = take(kv_width, "activations v");
    s.gate = take(hp.ffn_width(), "activations gate"), s.up = take(hp.ffn_width(), "activations up");
    if (hp.n_expert > 0) {   // the planner keeps experts on the CPU; the fields exist for the contract
        s.router = take(hp.n_expert, "activations router");
        s.moe_x = take(hp.n_embd, "activations moe_x"), s.moe_y = take(hp.n_embd, "activations moe_y");
        s.moe_acc = take((int64_t)hp.n_expert_used * hp.n_embd, "activations moe_acc");
    }
    const VulkanScratchParts parts = vulkan_scratch_parts(hp, T);
    std::unique_ptr<Buffer> logits = alloc_checked(parts.logits, MemKind::Scratch, "logits");
    std::unique_ptr<Buffer> cs0 = alloc_checked(parts.rope_tables / 2, MemKind::Scratch, "rope table");
    std::unique_ptr<Buffer> cs1 = alloc_checked(parts.rope_tables / 2, MemKind::Scratch, "rope table");
    const size_t ids = parts.batch_ids / 3;
    std::unique_ptr<Buffer> tokens = alloc_checked(ids, MemKind::Scratch, "token ids");
    std::unique_ptr<Buffer> positions = alloc_checked(ids, MemKind::Scratch, "positions");
    std::unique_ptr<Buffer> seqs = alloc_checked(ids, MemKind::Scratch, "sequence ids");
    // Only now, with everything allocated, does the old scratch go.
    act_ = std::move(act), logits_ = std::move(logits), rope_cs_[0] = std::move(cs0), rope_cs_[1] = std::move(cs1);
    tokens_buf_ = std::move(tokens), positions_buf_ = std::move(positions), seq_buf_ = std::move(seqs);
    positions_ = positions_buf_->data(), seq_of_token_ = seq_buf_->data();
    scratch_ = s;
    scratch_T_ = T;
}

// The block tables go up padded to a width that changes only when a sequence outgrows it (the
// next power of two blocks), so the kernels' table width, a push constant, stays the same from
// one decode step to the next while the sequences grow (the padding is never read: a token reads
// the blocks up to its own position).
int64_t padded_table_width(int64_t max_blocks) {
    int64_t w = 4;
    while (w < max_blocks) w *= 2;
    return w;
}

void VulkanBackend::begin_batch(const Batch& b) {
    const int64_t T = b.n_tokens;
    if (T > scratch_T_) reserve(T);
    table_width_ = padded_table_width(b.max_blocks);
    padded_tables_.assign((size_t)(b.n_seqs * table_width_), 0);
    for (int64_t s = 0; s < b.n_seqs; ++s)
        std::copy(b.block_tables + s * b.max_blocks, b.block_tables + (s + 1) * b.max_blocks,
                  padded_tables_.begin() + s * table_width_);
    const size_t table_bytes = padded_tables_.size() * sizeof(int32_t);
    if (!block_tables_ || block_tables_->bytes() < table_bytes)
        block_tables_ = alloc_checked(table_bytes, MemKind::Scratch, "block tables");
    host_positions_.assign(b.positions, b.positions + T);
    from_host(positions_, b.positions, (size_t)T * sizeof(int32_t));
    from_host(seq_of_token_, b.seq_of_token, (size_t)T * sizeof(int32_t));
    from_host(block_tables_->data(), padded_tables_.data(), table_bytes);
    for (RopeTable& r : rope_) r.valid = false;
}

// On a CPU implementation (lavapipe) the tiled kernel costs about 7 times the matrix-vector one
// per token (576x1536 Q4_1: 5 tokens tiled 0.31 s, 4 tokens matrix-vector 0.044 s), so there a
// batch goes through the matrix-vector kernel kMatVecMaxTokens rows at a time (where every output's
// rows can be bound at those offsets); GPUs take the tiled kernel for batches, and so does a CPU
// implementation with LOCALLLM_VULKAN_TILED=1 (the tests run the GPU's prompt path on lavapipe).
bool VulkanBackend::matvec_chunks(const LinearOut* outs, int n, int64_t T) const {
    static const char* tiled = getenv("LOCALLLM_VULKAN_TILED");
    if (T <= vk::kMatVecMaxTokens || mem_->ctx().info().type != "cpu" || (tiled && strcmp(tiled, "1") == 0))
        return false;
    const uint64_t rows = vk::kMatVecMaxTokens * sizeof(float);
    for (int i = 0; i < n; ++i)
        if (!mem_->ctx().bindable_offset(rows * (uint64_t)outs[i].w->ne0) ||
            !mem_->ctx().bindable_offset(rows * (uint64_t)outs[i].w->ne1))
            return false;
    return true;
}

std::vector<VulkanBackend::RowWindow> VulkanBackend::pieces(const WeightRef& w) const {
    auto win = windows_.find(w.data);
    return win != windows_.end() ? win->second : std::vector<RowWindow>{RowWindow{w.data, 0, w.ne1}};
}

// Tokens [t0, t0 + rows) through op_linear_rows's kernel (matrix-vector or tiled), each piece
// writing its columns of y. q8: x quantized to q8_1, made by the first integer-dot product of the
// group and read by the others.
void VulkanBackend::linear_rows(const WeightRef& w, vk::Buffer& bx, vk::Buffer& by, uint32_t t0, uint32_t rows,
                                std::optional<vk::Q8Input>& q8) {
    const uint32_t K = u32(w.ne0, "columns"), N = u32(w.ne1, "rows");
    const vk::BufferRange x{&bx, (uint64_t)t0 * K * 4}, y{&by, (uint64_t)t0 * N * 4};
    for (const RowWindow& r : pieces(w)) {
        const double flops = 2.0 * K * (double)r.rows * rows;
        const double bytes = (double)r.rows * (double)w.row_bytes + 4.0 * rows * (K + (double)r.rows);
        mem_->record(2, vk::slow_gpu_seconds(flops, bytes));   // with the q8_1 quantization of x, where taken
        vk::op_linear_rows(mem_->ctx(), (uint32_t)w.type, buf(r.data, w.name.c_str()), x, y, rows, u32(r.rows, "rows"),
                           K, vk::OutColumns{N, u32(r.row0, "window row")}, &q8);
    }
}

// The group's matrices read the same x, quantized once per run of tokens for all those that
// multiply it by integer dot products. Decode steps are one run (matrix-vector kernel); so are GPU
// batches (tiled kernel); a CPU implementation takes batches 4 tokens at a time (matvec_chunks).
void VulkanBackend::linear_group(const LinearOut* outs, int n, const float* x, int64_t T) {
    vk::Buffer& bx = buf(x, "linear input");
    const int64_t step = matvec_chunks(outs, n, T) ? vk::kMatVecMaxTokens : T;
    for (int64_t t0 = 0; t0 < T; t0 += step) {
        std::optional<vk::Q8Input> q8;
        const uint32_t rows = u32(std::min(step, T - t0), "tokens");
        for (int i = 0; i < n; ++i) linear_rows(*outs[i].w, bx, buf(outs[i].y, "linear output"), (uint32_t)t0, rows, q8);
    }
    for (int i = 0; i < n; ++i) {
        const WeightRef* bias = outs[i].bias;
        if (!bias || !bias->present()) continue;
        vk::Buffer& by = buf(outs[i].y, "linear output");
        mem_->record(1, traffic(12.0 * (double)T * (double)outs[i].w->ne1));
        vk::op_add(mem_->ctx(), by, buf(bias->data, bias->name.c_str()), by, u32(T * outs[i].w->ne1, "linear output"),
                   u32(outs[i].w->ne1, "bias"));
    }
}

// The table of a set of frequencies is made by the batch's first rope with it and reused by the
// other layers (two slots: Gemma3 alternates a local and a global base).
void VulkanBackend::rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const RopeFreqs& f,
                         RopeStyle style) {
    if (rope_dims > hp_->rope_dims || rope_dims > head_dim || rope_dims % 2)
        throw std::invalid_argument("Vulkan backend: rope_dims " + std::to_string(rope_dims) + " must be even and at " +
                                    "most head_dim and the model's " + std::to_string(hp_->rope_dims));
    if ((size_t)T > host_positions_.size()) throw std::logic_error("Vulkan backend: rope of more tokens than the batch");
    int slot = -1;
    for (int i = 0; i < 2; ++i)
        if (rope_[i].valid && rope_[i].freqs.same_as(f) && rope_[i].dims == rope_dims) slot = i;
    if (slot < 0) {
        slot = rope_[0].valid && !rope_[1].valid ? 1 : 0;   // a third set reuses the first slot
        std::vector<float> cs((size_t)(T * rope_dims));
        rope_table(host_positions_.data(), T, rope_dims, f, cs.data());
        from_host(rope_cs_[slot]->data(), cs.data(), cs.size() * sizeof(float));
        rope_[slot] = RopeTable{f, rope_dims, true};
    }
    vk::Buffer& bx = buf(x, "rope input");
    mem_->record(1, traffic(8.0 * (double)T * n_heads * head_dim));
    vk::op_rope(mem_->ctx(), bx, buf(rope_cs_[slot]->data(), "rope table"), u32(T, "tokens"), u32(n_heads, "heads"),
                u32(head_dim, "head_dim"), u32(rope_dims, "rope_dims"), style == RopeStyle::NeoX);
}

vk::KVLayerView VulkanBackend::kv_layer(const KVCache& kv, int layer) {
    if (kv.placement(layer) != placement())
        throw std::logic_error("Vulkan backend: layer " + std::to_string(layer) + "'s KV cache is not on this device");
    uint64_t k_off = 0, v_off = 0;
    vk::Buffer& cache = mem_->find(kv.k_data(layer), &k_off, "KV cache keys");
    vk::Buffer& v_cache = mem_->find(kv.v_data(layer), &v_off, "KV cache values");
    if (k_off != 0 || &v_cache != &cache)
        throw std::logic_error("Vulkan backend: a layer's keys and values must share one buffer, keys first");
    const vk::KVSide k{(uint32_t)kv.types().k, u32(kv.slot_row_bytes(false), "K row bytes"), (uint32_t)kv.rot_k()};
    const vk::KVSide v{(uint32_t)kv.types().v, u32(kv.slot_row_bytes(true), "V row bytes"), (uint32_t)kv.rot_v()};
    return vk::KVLayerView{&cache, v_off, u32(kv.kv_width(), "kv_width"), u32(kv.block_size(), "block size"), k, v};
}

void VulkanBackend::attention(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                              const AttnParams& p) {
    // The CPU's checks, on the host tables: every block read below is inside the cache.
    check_attention_call(kv, b, p.n_head, p.n_head_kv, p.head_dim, p.window);
    if (!(p.softcap >= 0.0f)) throw std::invalid_argument("attention: softcap must be >= 0");
    const vk::KVLayerView view = kv_layer(kv, layer);
    // Each (token, head) reads the keys and values of the positions it attends to.
    double attended = 0.0;
    for (int64_t t = 0; t < b.n_tokens; ++t) {
        const double ctx = (double)b.positions[t] + 1.0;
        attended += p.window > 0 ? std::min(ctx, (double)p.window) : ctx;
    }
    const double per_position = (double)p.n_head * p.head_dim;
    mem_->record(1, vk::slow_gpu_seconds(4.0 * per_position * attended, 4.0 * per_position * attended));
    vk::op_attention(mem_->ctx(), view, buf(q, "queries"), buf(out, "attention output"), batch_view(b),
                     vk::AttentionShape{u32(p.n_head, "heads"), u32(p.n_head_kv, "kv heads"),
                                        u32(p.head_dim, "head_dim"), u32(p.window, "window"), p.scale, p.softcap});
}

// Rows on the device are gathered by the dequantize kernel; rows left in the file are read on
// the host and their raw blocks uploaded for it.
void VulkanBackend::embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) {
    const WeightRef& e = table.rows;
    for (int64_t t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= e.ne1)
            throw std::out_of_range("token id " + std::to_string(tokens[t]) + " out of range [0, " +
                                    std::to_string(e.ne1) + ")");
    if (table.fd < 0) {
        if (e.placement != placement()) throw std::logic_error("Vulkan backend: the token embedding is not on this device");
        if (windows_.count(e.data))
            throw std::invalid_argument("Vulkan backend: " + e.name + " is held in row windows (over one buffer's "
                                        "limit); the embedding gathers from one buffer: embed on the CPU");
        from_host(tokens_buf_->data(), tokens, (size_t)T * sizeof(int32_t));
        mem_->record(1, traffic(8.0 * (double)T * (double)e.ne0));
        vk::op_embed(mem_->ctx(), (uint32_t)e.type, buf(e.data, e.name.c_str()), buf(tokens_buf_->data(), "token ids"),
                     buf(out, "embedding output"), u32(T, "tokens"), u32(e.ne0, "embedding width"));
        return;
    }
    std::vector<uint8_t> rows((size_t)T * e.row_bytes);
    for (int64_t t = 0; t < T; ++t) {
        const off_t at = (off_t)(table.file_offset + (uint64_t)tokens[t] * e.row_bytes);
        if (pread(table.fd, rows.data() + t * e.row_bytes, e.row_bytes, at) != (ssize_t)e.row_bytes)
            throw std::runtime_error("Vulkan backend: reading embedding row " + std::to_string(tokens[t]) + " failed");
    }
    std::unique_ptr<Buffer> raw = alloc_checked(rows.size(), MemKind::Scratch, "embedding rows");
    from_host(raw->data(), rows.data(), rows.size());
    mem_->record(1, traffic(8.0 * (double)T * (double)e.ne0));
    vk::op_dequantize(mem_->ctx(), (uint32_t)e.type, buf(raw->data(), "embedding rows"), buf(out, "embedding output"),
                      u32(T, "tokens"), u32(e.ne0, "embedding width"));
    sync();   // before the rows' buffer goes
}

// The wanted rows of x are gathered into h (one copy per run of consecutive rows), normed and
// multiplied on the device, as many rows at a time as the logits buffer holds; only the logits
// rows come back.
void VulkanBackend::output_head(const float* x, const Batch& b, const WeightRef& norm, float eps, const WeightRef& out,
                                float* logits_host) {
    const int64_t D = out.ne0, V = out.ne1;
    const int64_t group = vulkan_logits_rows(*hp_, scratch_T_);
    float* h = scratch_.h;                                       // [rows of this group, D]
    float* logits = reinterpret_cast<float*>(logits_->data());   // [rows of this group, V]
    for (int64_t g0 = 0; g0 < b.n_out; g0 += group) {
        const int64_t g1 = std::min(b.n_out, g0 + group);
        for (int64_t r = g0; r < g1;) {
            int64_t n = 1;
            while (r + n < g1 && b.output_rows[r + n] == b.output_rows[r] + n) ++n;
            copy(h + (r - g0) * D, x + (int64_t)b.output_rows[r] * D, (size_t)(n * D) * sizeof(float));
            r += n;
        }
        rms_norm(h, norm, h, g1 - g0, D, eps);
        linear(out, h, g1 - g0, logits);
        to_host(logits_host + g0 * V, logits, (size_t)((g1 - g0) * V) * sizeof(float));
    }
}

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(const BackendConfig& cfg) { return std::make_unique<VulkanBackend>(cfg); }

}  // namespace lll
#endif  // LOCALLLM_HAVE_VULKAN
