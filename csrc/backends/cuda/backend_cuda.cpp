// backend_cuda.cpp — the CUDA backend: backend.h's ops on the kernels of cuda/ through their C API
// (cuda/cuda_api.h). Compiled into every build (so its host-side logic is one code path) but
// compiled only where CMake defines LOCALLLM_HAVE_CUDA, i.e. where cuda/ is built (register.cpp).
//
// Every buffer is sized by footprint.h's CUDA rule, so a plan is what this allocates. All work is
// queued on one stream of the backend's own; copies to the host wait for it. Sampling stays on
// the CPU: output_head copies the wanted logits rows back.
#if defined(LOCALLLM_HAVE_CUDA)
#include <string.h>
#include <algorithm>
#include <stdexcept>
#include <string>
#include "cuda_api.h"
#include "backends/backend.h"
#include "backends/cuda/footprint_cuda.h"
#include "model/footprint.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace lll {

namespace {

using cuda::check;

// Device memory, zero-filled (Backend::alloc's contract).
class DeviceBuffer : public Buffer {
public:
    DeviceBuffer(size_t bytes, const char* what) {
        void* p = nullptr;
        if (bytes) {
            const llc_status s = llc_malloc(&p, bytes, what);
            if (s == LLC_OUT_OF_MEMORY) return;   // data() stays null: Backend::alloc names it
            check(s);
            const llc_status z = llc_memset(p, 0, bytes, nullptr);
            if (z == LLC_OK) check(llc_stream_sync(nullptr));
            else { llc_free(p); check(z); }
        }
        data_ = (uint8_t*)p;
        bytes_ = bytes;
        empty_ok_ = bytes == 0;
    }
    ~DeviceBuffer() override { if (data_) llc_free(data_); }
    bool ok() const { return data_ || empty_ok_; }
private:
    bool empty_ok_ = false;
};

// What rope() has made for the current batch: the (cos, sin) table of each set of frequencies
// seen.
struct RopeTable {
    RopeFreqs freqs;
    int dims = 0;
    bool valid = false;
};

class CudaBackend : public Backend {
public:
    explicit CudaBackend(const BackendConfig& cfg) : Backend(cfg.placement), hp_(cfg.hp) {
        if (llc_device_count() == 0)
            throw std::runtime_error("CUDA backend: no CUDA device (or driver) on this machine: run with -ngl 0");
        check(llc_set_device(cfg.placement.device));
        check(llc_stream_create(&stream_));
        if (!hp_->rope_freq_factors.empty()) {   // rope_freqs.weight, which every layer's rope reads
            const size_t bytes = hp_->rope_freq_factors.size() * sizeof(float);
            freq_factors_ = alloc(bytes, MemKind::Weights, "rope frequency factors");
            check(llc_memcpy_h2d(freq_factors_->data(), hp_->rope_freq_factors.data(), bytes, stream_));
            sync();
        }
    }
    ~CudaBackend() override {
        llc_stream_sync(stream_);
        weights_.reset();
        llc_stream_destroy(stream_);
    }

    void copy(void* dst, const void* src, size_t n) override { check(llc_memcpy_d2d(dst, src, n, stream_)); }
    void to_host(void* dst, const void* src, size_t n) override {
        check(llc_memcpy_d2h(dst, src, n, stream_));
        sync();
    }
    void from_host(void* dst, const void* src, size_t n) override {
        check(llc_memcpy_h2d(dst, src, n, stream_));
        sync();   // the host buffer may be reused as soon as this returns
    }
    void sync() override { check(llc_stream_sync(stream_)); }

    void place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) override;
    void reserve(int64_t T) override;
    void begin_batch(const Batch& b) override;

    void linear_group(const LinearOut* outs, int n, const float* x, int64_t T) override;
    void rms_norm(const float* x, const WeightRef& w, float* y, int64_t rows, int64_t n, float eps) override {
        check(llc_rms_norm(x, w.f32(), y, rows, n, eps, stream_));
    }
    void rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const RopeFreqs& f,
              RopeStyle style) override;
    void scale(float* x, float s, int64_t n) override { check(llc_scale(x, s, n, stream_)); }
    void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b) override {
        check(llc_kv_write(kv_layer(kv, layer), k, v, &dbatch_, stream_));
    }
    void attention(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                   const AttnParams& p) override {
        check(llc_attention(kv_layer(kv, layer), q, out, &dbatch_, p.n_head, p.n_head_kv, p.head_dim, p.scale,
                            p.window, p.softcap, stream_));
    }
    void glu(const float* gate, const float* up, float* out, int64_t n, FFNAct act) override {
        check(act == FFNAct::SiLU ? llc_swiglu(gate, up, out, n, stream_) : llc_geglu(gate, up, out, n, stream_));
    }
    void add(float* y, const float* x, int64_t n) override { check(llc_add(y, x, n, stream_)); }
    void embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) override;
    void output_head(const float* x, const Batch& b, const WeightRef& norm, float eps, const WeightRef& out,
                     float* logits_host) override;

protected:
    std::unique_ptr<Buffer> alloc_raw(size_t bytes, MemKind kind) override {
        auto b = std::make_unique<DeviceBuffer>(bytes, mem_kind_name(kind));
        return b->ok() ? std::move(b) : nullptr;
    }

private:
    llc_kv_layer kv_layer(const KVCache& kv, int layer) const {
        if (kv.placement(layer) != placement())
            throw std::logic_error("CUDA backend: layer " + std::to_string(layer) + "'s KV cache is not on the GPU");
        if (!kv.is_f16()) throw std::invalid_argument("CUDA backend: the KV cache on the GPU must be f16");
        return llc_kv_layer{kv.k_data(layer), kv.v_data(layer),
                            kv.n_blocks(), kv.block_size(), kv.kv_width()};
    }
    void upload_ids(int32_t* dst, const int32_t* host, int64_t n) {
        if (n) check(llc_memcpy_h2d(dst, host, (size_t)n * sizeof(int32_t), stream_));
    }

    const HParams* hp_;
    llc_stream stream_ = nullptr;
    std::unique_ptr<Buffer> weights_;                 // one arena, cuda_weight_bytes each
    std::unique_ptr<Buffer> act_, logits_, rope_cs_, act_q8_, ids_;   // footprint.h CudaScratchParts
    std::unique_ptr<Buffer> freq_factors_;            // hp_->rope_freq_factors on the device
    std::unique_ptr<Buffer> block_tables_;            // grown to the largest batch's tables
    int64_t scratch_T_ = 0;
    int32_t *tokens_ = nullptr, *positions_ = nullptr, *seq_of_token_ = nullptr, *tiles_ = nullptr;
    RopeTable rope_[2];
    llc_batch dbatch_{};                              // the current batch, device pointers
    std::vector<int32_t> host_tiles_;                 // [T][2] llc_attention_tiles' query ranges
};

void CudaBackend::place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) {
    std::vector<WeightRef*> all(matrices.begin(), matrices.end());
    all.insert(all.end(), vectors.begin(), vectors.end());
    size_t total = 0;
    for (const WeightRef* w : all) {
        if (w->present() && !llc_matmul_supports((uint32_t)w->type) && w->ne1 > 1)
            throw std::invalid_argument("CUDA backend: no kernel for " + w->name + "'s type (GGUF id " +
                                        std::to_string((int)w->type) + "): run it on the CPU (lower -ngl)");
        total += cuda_weight_bytes(*w);
    }
    weights_ = alloc(total, MemKind::Weights, "weights");
    size_t at = 0;
    for (WeightRef* w : all) {
        if (!w->present()) continue;
        uint8_t* dst = weights_->data() + at;
        check(llc_memcpy_h2d(dst, w->data, w->bytes(), stream_));
        sync();   // the source may be a buffer the loader frees or a mapping it releases
        w->data = dst;
        at += cuda_weight_bytes(*w);
    }
}

void CudaBackend::reserve(int64_t T) {
    if (T <= scratch_T_) return;
    const HParams& hp = *hp_;
    const CudaScratchParts parts = cuda_scratch_parts(hp, T);
    // All new buffers first: when one does not fit, the old scratch stays whole.
    std::unique_ptr<Buffer> act = alloc(parts.activations, MemKind::Scratch, "activations");
    std::unique_ptr<Buffer> logits = alloc(parts.logits, MemKind::Scratch, "logits");
    std::unique_ptr<Buffer> rope = alloc(parts.rope_tables, MemKind::Scratch, "rope tables");
    std::unique_ptr<Buffer> q8 = alloc(parts.act_q8, MemKind::Scratch, "q8_1 activations");
    std::unique_ptr<Buffer> ids = alloc(parts.batch_ids, MemKind::Scratch, "batch tables");
    act_ = std::move(act), logits_ = std::move(logits), rope_cs_ = std::move(rope), act_q8_ = std::move(q8);
    ids_ = std::move(ids);
    scratch_ = layout_act_scratch(hp, T, reinterpret_cast<float*>(act_->data()));
    int32_t* p = reinterpret_cast<int32_t*>(ids_->data());
    tokens_ = p, positions_ = p + T, seq_of_token_ = p + 2 * T, tiles_ = p + 3 * T;   // tiles: [T][2]
    scratch_T_ = T;
}

// The batch's addressing goes to the device once; every layer's kv_write and attention read it.
void CudaBackend::begin_batch(const Batch& b) {
    const int64_t T = b.n_tokens;
    if (T > scratch_T_) reserve(T);
    const size_t table_bytes = (size_t)(b.n_seqs * b.max_blocks) * sizeof(int32_t);
    if (!block_tables_ || block_tables_->bytes() < table_bytes)
        block_tables_ = alloc(table_bytes, MemKind::Scratch, "block tables");
    host_tiles_.resize((size_t)(2 * T));
    int32_t max_tile = 0;
    const int64_t n_tiles = llc_attention_tiles(b.seq_of_token, T, host_tiles_.data(), &max_tile);
    upload_ids(positions_, b.positions, T);
    upload_ids(seq_of_token_, b.seq_of_token, T);
    upload_ids(tiles_, host_tiles_.data(), 2 * n_tiles);
    upload_ids(reinterpret_cast<int32_t*>(block_tables_->data()), b.block_tables, b.n_seqs * b.max_blocks);
    dbatch_ = llc_batch{positions_, seq_of_token_, reinterpret_cast<const int32_t*>(block_tables_->data()), tiles_,
                        T, b.n_seqs, b.max_blocks, n_tiles, max_tile};
    for (RopeTable& r : rope_) r.valid = false;
    sync();   // the host tables may change once this returns
}

void CudaBackend::linear_group(const LinearOut* outs, int n, const float* x, int64_t T) {
    for (int i = 0; i < n; ++i) {
        const WeightRef& w = *outs[i].w;
        check(llc_matmul((uint32_t)w.type, w.data, w.ne1, w.ne0, x, T, outs[i].y, act_q8_->data(), act_q8_->bytes(),
                         LLC_MATMUL_AUTO, stream_));
        const WeightRef* bias = outs[i].bias;
        if (bias && bias->present()) check(llc_add_bias_rows(outs[i].y, bias->f32(), T, w.ne1, stream_));
    }
}

// The (cos, sin) table of a base is made by the batch's first rope with it and reused by the
// other layers (two slots: Gemma3 alternates a local and a global base).
void CudaBackend::rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const RopeFreqs& f,
                       RopeStyle style) {
    if (rope_dims > hp_->rope_dims)
        throw std::invalid_argument("CUDA backend: rope_dims " + std::to_string(rope_dims) + " exceeds the model's " +
                                    std::to_string(hp_->rope_dims));
    int slot = -1;
    for (int i = 0; i < 2; ++i)
        if (rope_[i].valid && rope_[i].freqs.same_as(f) && rope_[i].dims == rope_dims) slot = i;
    float* cs0 = reinterpret_cast<float*>(rope_cs_->data());
    if (slot < 0) {
        slot = rope_[0].valid ? 1 : 0;
        if (rope_[0].valid && rope_[1].valid) slot = 0;   // a third base: reuse the first slot
        if (f.freq_factors && f.freq_factors != hp_->rope_freq_factors.data())
            throw std::invalid_argument("CUDA backend: rope frequency factors other than the model's");
        const RopeScaling& sc = f.scaling;
        const llc_rope_scaling scaling{sc.freq_scale, sc.ext_factor, sc.attn_factor, sc.n_ctx_orig, sc.beta_fast,
                                       sc.beta_slow,
                                       f.freq_factors ? reinterpret_cast<const float*>(freq_factors_->data()) : nullptr};
        check(llc_rope_table(positions_, T, rope_dims, f.base, &scaling, cs0 + slot * scratch_T_ * hp_->rope_dims,
                             stream_));
        rope_[slot] = RopeTable{f, rope_dims, true};
    }
    check(llc_rope(x, T, n_heads, head_dim, rope_dims, cs0 + slot * scratch_T_ * hp_->rope_dims,
                   style == RopeStyle::NeoX ? 1 : 0, stream_));
}

void CudaBackend::embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) {
    const WeightRef& e = table.rows;
    if (e.placement != placement() || table.fd >= 0)
        throw std::logic_error("CUDA backend: the token embedding is not on the GPU");
    for (int64_t t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= e.ne1)
            throw std::out_of_range("token id " + std::to_string(tokens[t]) + " out of range [0, " +
                                    std::to_string(e.ne1) + ")");
    upload_ids(tokens_, tokens, T);
    check(llc_get_rows((uint32_t)e.type, e.data, e.ne1, e.ne0, tokens_, T, out, stream_));
}

// The wanted rows of x are gathered into h (one copy per run of consecutive rows), normed and
// multiplied on the GPU; only the logits rows come back.
void CudaBackend::output_head(const float* x, const Batch& b, const WeightRef& norm, float eps, const WeightRef& out,
                              float* logits_host) {
    const int64_t D = out.ne0;
    float* h = scratch_.h;                                   // [n_out, D] rows wanted
    for (int64_t r = 0; r < b.n_out;) {
        int64_t n = 1;
        while (r + n < b.n_out && b.output_rows[r + n] == b.output_rows[r] + n) ++n;
        copy(h + r * D, x + (int64_t)b.output_rows[r] * D, (size_t)(n * D) * sizeof(float));
        r += n;
    }
    rms_norm(h, norm, h, b.n_out, D, eps);
    float* logits = reinterpret_cast<float*>(logits_->data());   // [n_out, n_vocab]
    linear(out, h, b.n_out, logits);
    to_host(logits_host, logits, (size_t)(b.n_out * out.ne1) * sizeof(float));
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendConfig& cfg) { return std::make_unique<CudaBackend>(cfg); }

}  // namespace lll
#endif  // LOCALLLM_HAVE_CUDA
