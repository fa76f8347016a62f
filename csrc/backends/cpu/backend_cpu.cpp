// backend_cpu.cpp — the CPU backend: this project's CPU kernels behind backend.h, and the one
// place the CPU's kernel for a matrix is chosen (linear_quantized, linear_group) from the
// numerics (model.h Numerics) and the weight's layout.
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <stdexcept>
#include "backends/cpu/attention.h"
#include "backends/backend.h"
#include "backends/cpu/footprint_cpu.h"
#include "model/footprint.h"
#include "backends/cpu/matmul.h"
#include "model/activation_stats.h"
#include "model/model.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/ggml_numerics/ggml_order.h"

namespace lll {

namespace {

// Host memory, every kind: 2 MiB aligned, advised as transparent huge pages and touched here.
// - Weights: decode streams them once per token; 4 KiB pages would cost a TLB miss every 4 KiB.
// - KV cache: touched at load as llama.cpp clears its cache. Left to first use, each block of a
//   pool walked in LRU order faulted (and the kernel zeroed it) on its first write, which cost
//   every prompt of the first pass through the pool 3-5% (Gemma3-270M pp512).
// - Scratch: one block per backend (~17 MB at 512 tokens on Gemma3-270M), reused every forward;
//   one path for every kind (huge pages made no difference here measurable through the noise).
// Only the whole 2 MiB ranges are advised: the tail (and a buffer under 2 MiB, such as one
// layer's KV at a small context) stays on 4 KiB pages, so resident memory is what was asked for.
class HostBuffer : public Buffer {
public:
    explicit HostBuffer(size_t bytes) {
        constexpr size_t kHuge = 2u << 20;
        const size_t alloc = (bytes + kHuge - 1) / kHuge * kHuge;
        data_ = (uint8_t*)aligned_alloc(kHuge, alloc ? alloc : kHuge);
        if (data_) {
            if (bytes >= kHuge) madvise(data_, bytes / kHuge * kHuge, MADV_HUGEPAGE);
            memset(data_, 0, bytes);
        }
        bytes_ = bytes;
    }
    ~HostBuffer() override { free(data_); }
};

class CpuBackend : public Backend {
public:
    explicit CpuBackend(const BackendConfig& cfg)
        : Backend(cfg.placement), hp_(cfg.hp), pool_(*cfg.pool), isa_(cfg.isa), numerics_(cfg.numerics) {}

    void copy(void* dst, const void* src, size_t n) override { memcpy(dst, src, n); }
    void to_host(void* dst, const void* src, size_t n) override { memcpy(dst, src, n); }
    void from_host(void* dst, const void* src, size_t n) override { memcpy(dst, src, n); }
    void sync() override {}

    void place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) override;
    void reserve(int64_t T) override;
    void begin_batch(const Batch& b) override { batch_ = &b; }

    bool observe_activations(ActivationStats* stats) override {
        observer_ = stats;
        return true;
    }
    void linear_group(const LinearOut* outs, int n, const float* x, int64_t T) override;
    void rms_norm(const float* x, const WeightRef& w, float* y, int64_t rows, int64_t n, float eps) override {
        rms_norm_rows(pool_, x, w.f32(), y, rows, n, eps);
    }
    void rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const RopeFreqs& f,
              RopeStyle style) override {
        lll::rope(pool_, x, T, n_heads, head_dim, rope_dims, rope_cs(batch_->positions, T, rope_dims, f), style);
    }
    void scale(float* x, float s, int64_t n) override { scale_inplace(x, s, n); }
    void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b) override {
        lll::kv_write(kv, layer, k, v, b);
    }
    void attention(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                   const AttnParams& p) override {
        if (numerics_ == Numerics::LlamaCpp)
            attention_ggml(pool_, kv, layer, q, out, b, p.n_head, p.n_head_kv, p.head_dim, p.scale, p.window,
                           p.softcap);
        else
            lll::attention(pool_, kv, layer, q, out, b, p.n_head, p.n_head_kv, p.head_dim, p.scale, p.window,
                           p.softcap);
    }
    void glu(const float* gate, const float* up, float* out, int64_t n, FFNAct act) override {
        if (act == FFNAct::SiLU) swiglu(pool_, gate, up, out, n);
        else geglu(pool_, gate, up, out, n);
    }
    void add(float* y, const float* x, int64_t n) override { add_inplace(y, x, n); }
    void layer_norm(const float* x, const WeightRef& w, const WeightRef& b, float* y, int64_t rows, int64_t n,
                    float eps) override {
        layer_norm_rows(pool_, x, w.present() ? w.f32() : nullptr, b.present() ? b.f32() : nullptr, y, rows, n, eps);
    }
    void gelu(float* x, int64_t n) override { gelu_erf(pool_, x, n); }
    void embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) override;
    void output_head(const float* x, const Batch& b, const WeightRef& norm, float eps, const WeightRef& out,
                     float* logits) override;

protected:
    std::unique_ptr<Buffer> alloc_raw(size_t bytes, MemKind kind) override {
        auto b = std::make_unique<HostBuffer>(bytes);
        return b->data() ? std::move(b) : nullptr;
    }

private:
    bool llamacpp_kernel(const WeightRef& w) const {
        return numerics_ == Numerics::LlamaCpp && ggml_order::supported(w.type, w.ne1);
    }
    void linear_quantized(const WeightRef& w, const void* xq, int64_t T, float* y, const WeightRef* bias);
    struct PendingGroup;
    void flush_group(PendingGroup& group, int64_t T);
    const float* rope_cs(const int32_t* positions, int64_t T, int rope_dims, const RopeFreqs& f);

    const HParams* hp_;
    ThreadPool& pool_;
    Isa isa_;
    Numerics numerics_;
    const Batch* batch_ = nullptr;
    ActivationStats* observer_ = nullptr;        // set while a Model collects activation statistics
    std::vector<const WeightRef*> matrices_;     // what it multiplies (sizes the xq scratch)
    std::unique_ptr<Buffer> repacked_;           // the repacked matrices, one arena
    std::unique_ptr<Buffer> vector_copies_;      // norm weights and biases, out of the mapping
    std::unique_ptr<Buffer> act_, xq_;           // scratch: float activations, quantized x
    int64_t scratch_T_ = 0;
    struct RopeCache {
        RopeFreqs freqs;
        int dims = 0;
        std::vector<int32_t> positions;
        std::vector<float> cs;
    } rope_cache_[2];
    int rope_cache_next_ = 0;
};

// The matrices of block-sequential types are repacked into 16-row panels (same size), and the
// file pages they came from are dropped from memory: peak RSS stays that of the weights. Norm
// weights and biases are then copied out of the mapping: touching one would map back the whole
// page-cache folio around it (24 MB of RSS over SmolLM2's 61 norm vectors in one forward).
void CpuBackend::place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) {
    const long page = sysconf(_SC_PAGESIZE);
    matrices_.assign(matrices.begin(), matrices.end());
    std::vector<size_t> offset;
    const size_t total = cpu_repack_layout(matrices_, isa_, numerics_, &offset);
    if (total == 0) return;
    const std::vector<const WeightRef*> vecs(vectors.begin(), vectors.end());
    vector_copies_ = alloc(cpu_vector_copy_bytes(vecs), MemKind::Weights, "norm and bias vectors");
    uint8_t* vdst = vector_copies_->data();
    for (WeightRef* w : vectors) {
        if (!w->present()) continue;
        const size_t n = (size_t)(w->ne0 * w->ne1) * sizeof(float);
        memcpy(vdst, w->data, n);   // the weight list checked: vectors are F32
        w->data = vdst;
        vdst += n;
    }
    repacked_ = alloc(total, MemKind::Weights, "repacked matrices");
    // Slices of rows, each released from memory as soon as it is repacked: the old and new copies
    // of a large matrix (a 170 MB tied embedding) never sit in memory together.
    constexpr int64_t kSliceRows = 8192;
    for (size_t i = 0; i < matrices.size(); ++i) {
        WeightRef* w = matrices[i];
        if (!cpu_repacks(*w, isa_, numerics_)) continue;
        uint8_t* dst = repacked_->data() + offset[i];
        for (int64_t r0 = 0; r0 < w->ne1; r0 += kSliceRows) {
            const int64_t rows = std::min(kSliceRows, w->ne1 - r0);
            const uint8_t* src = w->data + r0 * w->row_bytes;
            repack_weight(pool_, w->type, src, rows, w->ne0, dst + r0 * w->row_bytes);
            const uintptr_t lo = ((uintptr_t)src + page - 1) / page * page;
            const uintptr_t hi = ((uintptr_t)src + rows * w->row_bytes) / page * page;
            if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
        }
        w->data = dst;
        w->repacked = true;
    }
}

const float* CpuBackend::rope_cs(const int32_t* positions, int64_t T, int rope_dims, const RopeFreqs& f) {
    // Made by the forward's first layer with those frequencies, reused by the others (Gemma3
    // alternates two bases).
    for (RopeCache& c : rope_cache_)
        if (c.freqs.same_as(f) && c.dims == rope_dims && (int64_t)c.positions.size() == T &&
            std::equal(positions, positions + T, c.positions.begin()))
            return c.cs.data();
    RopeCache& c = rope_cache_[rope_cache_next_];
    rope_cache_next_ = (rope_cache_next_ + 1) % 2;
    c.freqs = f;
    c.dims = rope_dims;
    c.positions.assign(positions, positions + T);
    c.cs.resize((size_t)(T * rope_dims));
    rope_table(positions, T, rope_dims, f, c.cs.data());
    return c.cs.data();
}

void CpuBackend::reserve(int64_t T) {
    if (T <= scratch_T_) return;
    const HParams& hp = *hp_;
    // Both new buffers first: when one does not fit, the old scratch stays whole.
    std::unique_ptr<Buffer> act = alloc(act_scratch_floats(hp, T) * sizeof(float), MemKind::Scratch, "activations");
    std::unique_ptr<Buffer> xq = alloc(cpu_act_quant_bytes(hp, matrices_, T), MemKind::Scratch, "quantized activations");
    act_ = std::move(act);
    xq_ = std::move(xq);
    scratch_ = layout_act_scratch(hp, T, reinterpret_cast<float*>(act_->data()));
    scratch_T_ = T;
}

// y = x . w^T with x already quantized to w's activation type.
void CpuBackend::linear_quantized(const WeightRef& w, const void* xq, int64_t T, float* y, const WeightRef* bias) {
    if (w.repacked) matmul_q_repacked(pool_, w.type, w.data, w.ne1, w.ne0, xq, T, y, w.ne1, isa_);
    else if (llamacpp_kernel(w)) ggml_order::matmul_legacy(pool_, w.type, w.data, w.ne1, w.ne0, xq, T, y, w.ne1);
    else matmul_q(pool_, w.type, w.data, w.ne1, w.ne0, xq, T, y, w.ne1, isa_);
    if (bias && bias->present()) add_bias_rows(y, bias->f32(), T, w.ne1);
}

// Matrices waiting to run on the quantized x in xq_ in one parallel region (a fixed array: no
// allocation): all repacked, or all of one type that runs tile kernels (runs_tiles).
struct CpuBackend::PendingGroup {
    static constexpr int kMax = 4;
    const LinearOut* out[kMax];
    int n = 0;
    bool tiles = false;
};

// The matrices collected for one quantized x, as one matmul_q_repacked_group or matmul_q_group
// (which adds the biases itself).
void CpuBackend::flush_group(PendingGroup& group, int64_t T) {
    if (group.n == 0) return;
    if (group.tiles) {
        TileMatmul jobs[PendingGroup::kMax];
        for (int i = 0; i < group.n; ++i) {
            const LinearOut& o = *group.out[i];
            jobs[i] = {o.w->type, o.w->data, o.w->ne1, o.y, o.w->ne1, o.bias && o.bias->present() ? o.bias->f32() : nullptr};
        }
        matmul_q_group(pool_, jobs, group.n, group.out[0]->w->ne0, xq_->data(), T, isa_);
        group.n = 0;
        return;
    }
    RepackedMatmul jobs[PendingGroup::kMax];
    for (int i = 0; i < group.n; ++i) {
        const WeightRef& w = *group.out[i]->w;
        jobs[i] = {w.type, w.data, w.ne1, group.out[i]->y, w.ne1};
    }
    matmul_q_repacked_group(pool_, jobs, group.n, group.out[0]->w->ne0, xq_->data(), T, isa_);
    for (int i = 0; i < group.n; ++i) {
        const LinearOut& o = *group.out[i];
        if (o.bias && o.bias->present()) add_bias_rows(o.y, o.bias->f32(), T, o.w->ne1);
    }
    group.n = 0;
}

// x is quantized once for each run of matrices that share an activation type, not once per
// matrix, and the repacked ones of a run go to the pool together.
void CpuBackend::linear_group(const LinearOut* outs, int n, const float* x, int64_t T) {
    if (observer_) {
        // The parts of one fused tensor (consecutive in a group) are one multiplication of x.
        for (int i = 0; i < n; ++i)
            if (i == 0 || outs[i].w->tensor != outs[i - 1].w->tensor) observer_->observe(*outs[i].w, x, T);
    }
    void* xq = xq_->data();
    PendingGroup group;
    bool quantized = false;
    GGMLType quantized_as = GGMLType::F32;
    for (int i = 0; i < n; ++i) {
        const LinearOut& o = outs[i];
        // llama.cpp numerics, K-quants: the kernel quantizes x itself (its choice depends on T).
        // Legacy types share the quantized x below, as ggml's activation rounding is the same.
        if (llamacpp_kernel(*o.w) && !ggml_order::legacy_supported(o.w->type)) {
            ggml_order::matmul(pool_, o.w->type, o.w->data, o.w->ne1, o.w->ne0, x, T, o.y, o.w->ne1);
            if (o.bias && o.bias->present()) add_bias_rows(o.y, o.bias->f32(), T, o.w->ne1);
            continue;
        }
        const GGMLType vdt = type_traits(o.w->type)->vec_dot_type;
        if (!quantized || vdt != quantized_as) {
            flush_group(group, T);
            quantize_activations(pool_, vdt, x, T, o.w->ne0, xq, isa_);
            quantized = true;
            quantized_as = vdt;
        }
        const bool tiles = !o.w->repacked && !llamacpp_kernel(*o.w) && runs_tiles(o.w->type, isa_);
        if (!o.w->repacked && !tiles) {
            linear_quantized(*o.w, xq, T, o.y, o.bias);
            continue;
        }
        if (group.n == PendingGroup::kMax ||
            (group.n > 0 && (group.tiles != tiles || (tiles && group.out[0]->w->type != o.w->type))))
            flush_group(group, T);
        group.tiles = tiles;
        group.out[group.n++] = &o;   // run together: one parallel region
    }
    flush_group(group, T);
}

void CpuBackend::embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) {
    const WeightRef& e = table.rows;
    if (table.fd < 0) {
        embed_tokens(e, tokens, T, out);
        return;
    }
    std::vector<uint8_t> row(e.row_bytes);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t id = tokens[t];
        if (id < 0 || id >= e.ne1)
            throw std::out_of_range("token id " + std::to_string(id) + " out of range [0, " + std::to_string(e.ne1) + ")");
        const off_t at = (off_t)(table.file_offset + (uint64_t)id * e.row_bytes);
        for (size_t done = 0; done < e.row_bytes;) {
            const ssize_t got = pread(table.fd, row.data() + done, e.row_bytes - done, at + (off_t)done);
            if (got <= 0) throw std::runtime_error("reading " + e.name + " row " + std::to_string(id) + " failed");
            done += (size_t)got;
        }
        dequantize_row(e.type, row.data(), out + t * e.ne0, e.ne0);
    }
}

void CpuBackend::output_head(const float* x, const Batch& b, const WeightRef& norm, float eps, const WeightRef& out,
                             float* logits) {
    const int64_t D = out.ne0;
    float* h = scratch_.h;                                   // [n_out, D] rows wanted
    for (int64_t r = 0; r < b.n_out; ++r)
        lll::rms_norm(x + (int64_t)b.output_rows[r] * D, norm.f32(), h + r * D, D, eps);
    linear(out, h, b.n_out, logits);                         // logits [n_out, n_vocab]
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendConfig& cfg) { return std::make_unique<CpuBackend>(cfg); }

}  // namespace lll
