// backend.h — the seam between the forward pass and the hardware that runs a layer.
//
// A Backend owns memory (weights, KV blocks, scratch activations: all allocated through alloc(),
// so a device backend holds device memory) and runs whole layer-level operations on it. Every
// pointer an op receives lives on that backend (host memory for the CPU, device memory for a
// GPU), except where a comment says "host". The Model gives each layer one backend (model.cpp);
// architecture files (csrc/models/*.cpp) call only the ops below, never a kernel.
//
// Backends are listed in the registry (registry.h), which makes them (make_backend): see
// docs/architecture.md, "Placement" and "Adding a backend".
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <memory>
#include <string>
#include <vector>
#include "model/tensor.h"

namespace lll {

struct Batch;
struct HParams;
struct RopeFreqs;
class KVCache;
class ThreadPool;
class ActivationStats;
enum class RopeStyle : int;
enum class Numerics : int;
enum class Isa : int;

// What an allocation is for; the planner (footprint.h) predicts each kind's bytes exactly.
enum class MemKind : int { Weights = 0, KV = 1, Scratch = 2 };
constexpr int kMemKinds = 3;
const char* mem_kind_name(MemKind k);

// A zero-filled block of one backend's memory, released with the object.
class Buffer {
public:
    virtual ~Buffer() = default;
    uint8_t* data() const { return data_; }
    size_t bytes() const { return bytes_; }
protected:
    uint8_t* data_ = nullptr;
    size_t bytes_ = 0;
};

// One output of a grouped linear: y[T, w->ne1] = x[T, w->ne0] . w^T (+ bias[w->ne1]).
struct LinearOut {
    const WeightRef* w;
    float* y;
    const WeightRef* bias;   // or null (an absent WeightRef counts as none)
};

enum class FFNAct { SiLU, GELU };

struct AttnParams {
    int n_head, n_head_kv, head_dim;
    float scale;   // applied to q.k
    int window;    // sliding window in tokens, 0 = causal over the whole sequence
    float softcap = 0.0f;   // scores become tanh(s / softcap) * softcap (Gemma 2); 0 = none
};

// The input embedding's rows: in `rows` (on the backend), or, when fd >= 0, read from the file
// at file_offset + id * rows.row_bytes (model.cpp says why).
struct EmbeddingTable {
    WeightRef rows;
    int fd = -1;
    uint64_t file_offset = 0;
};

// The activations of one forward on one backend, each [T, width] for the T it was reserved for.
struct ActScratch {
    float *x = nullptr, *h = nullptr;         // [T, n_embd] residual stream, normalized input
    float *q = nullptr, *attn = nullptr;      // [T, n_head * head_dim]
    float *k = nullptr, *v = nullptr;         // [T, n_head_kv * head_dim]
    float *gate = nullptr, *up = nullptr;     // [T, ffn_width] (the dense FFN's or an expert's)
    float* tmp = nullptr;                     // [T, n_embd] a sub-layer's output
    // Mixture of experts only (null when dense):
    float* router = nullptr;                  // [T, n_expert] the router's logits
    float *moe_x = nullptr, *moe_y = nullptr; // [T, n_embd] one expert's tokens' input, output
    float* moe_acc = nullptr;                 // [T, n_expert_used, n_embd] weighted expert outputs
};

// The ActScratch of T tokens laid out in one block of act_scratch_floats(hp, T) floats at base.
ActScratch layout_act_scratch(const HParams& hp, int64_t T, float* base);

class Backend {
public:
    explicit Backend(Placement placement) : placement_(placement) {}
    virtual ~Backend() = default;
    Placement placement() const { return placement_; }
    const char* name() const { return placement_name(placement_); }
    // Whether its memory is host memory the CPU's kernels read (registry.h BackendInfo::host).
    bool host_memory() const;

    // ---- memory ----
    // A zero-filled buffer; a failure is an error naming `what` and the size, never a crash.
    std::unique_ptr<Buffer> alloc(size_t bytes, MemKind kind, const std::string& what);
    // Bytes of the live buffers of one kind (what the planner is held to).
    size_t allocated(MemKind kind) const { return allocated_[(int)kind]; }
    // Bytes of device memory its driver holds for it now, where the backend can tell (Vulkan: the
    // memory requirements of its buffers); default: the sum of allocated(), what it asked for.
    virtual size_t device_memory() const;
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;             // both on this backend
    virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
    virtual void from_host(void* dst, const void* host_src, size_t bytes) = 0;
    virtual void sync() = 0;                                                     // ops so far are done

    // ---- weights ----
    // Takes the weights of the layers (and output head) it runs, in the order a token uses them,
    // and makes each usable by its ops (the CPU repacks some; a GPU uploads them): rewrites
    // data/repacked. Called once, before the first op.
    virtual void place_weights(const std::vector<WeightRef*>& matrices, const std::vector<WeightRef*>& vectors) = 0;

    // ---- activations ----
    // Scratch for batches of up to T tokens (grown, never shrunk); scratch() is valid until the
    // next reserve.
    virtual void reserve(int64_t T) = 0;
    const ActScratch& scratch() const { return scratch_; }
    // Called once per forward before the first op: the batch's positions, sequences and block
    // tables (host) that kv_write, rope and attention read (a GPU uploads them here).
    virtual void begin_batch(const Batch& b) = 0;

    // ---- observation ----
    // From now on, hand every matrix's float input to `stats` (activation_stats.h), or stop
    // (nullptr). Returns false where the backend cannot observe (the default: a device backend).
    virtual bool observe_activations(ActivationStats* stats) { return stats == nullptr; }

    // ---- layer-level operations ----
    // Several matrices on the same x[T, K] (q/k/v, gate/up): each out[i].y = x . out[i].w^T.
    virtual void linear_group(const LinearOut* outs, int n, const float* x, int64_t T) = 0;
    void linear(const WeightRef& w, const float* x, int64_t T, float* y, const WeightRef* bias = nullptr) {
        const LinearOut o{&w, y, bias};
        linear_group(&o, 1, x, T);
    }
    // y[rows, n] = x / sqrt(mean(x^2) + eps) * w, per row (in place allowed).
    virtual void rms_norm(const float* x, const WeightRef& w, float* y, int64_t rows, int64_t n, float eps) = 0;
    // x[T, n_heads, head_dim] rotated in place at the batch's positions.
    virtual void rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const RopeFreqs& f,
                      RopeStyle style) = 0;
    virtual void scale(float* x, float s, int64_t n) = 0;                       // x *= s
    // k, v [T, kv_width] stored in each token's slot of layer `layer` (the layer's KV is on this backend).
    virtual void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b) = 0;
    // out[T, n_head*head_dim] = softmax(scale q.K^T) V through the block tables.
    virtual void attention(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                           const AttnParams& p) = 0;
    virtual void glu(const float* gate, const float* up, float* out, int64_t n, FFNAct act) = 0;  // act(gate) * up
    // Encoder ops (bert, nomic-bert). Encoders run on the CPU only (gpu_layers_max), so a backend
    // may leave these to the defaults, which refuse.
    // y[rows, n] = (x - mean) / sqrt(var + eps) * w + b, per row (in place allowed; b may be absent).
    virtual void layer_norm(const float* x, const WeightRef& w, const WeightRef& b, float* y, int64_t rows, int64_t n,
                            float eps);
    virtual void gelu(float* x, int64_t n);   // x = x * Phi(x), the exact (erf) GELU, in place
    virtual void add(float* y, const float* x, int64_t n) = 0;                  // y += x
    // out[T, n_embd] = rows of the table for tokens (host ids).
    virtual void embed(const EmbeddingTable& table, const int32_t* tokens, int64_t T, float* out) = 0;
    // logits (host) [b.n_out, out.ne1] = rms_norm(x[b.output_rows]) * norm . out^T; uses scratch h.
    virtual void output_head(const float* x, const Batch& b, const WeightRef& norm, float eps,
                             const WeightRef& out, float* logits_host) = 0;

protected:
    // Each backend's way to get zero-filled memory (nullptr when it has none left).
    virtual std::unique_ptr<Buffer> alloc_raw(size_t bytes, MemKind kind) = 0;
    ActScratch scratch_;
private:
    Placement placement_;
    // Shared with the buffers, which give their bytes back when released.
    std::shared_ptr<size_t[]> allocated_ = std::shared_ptr<size_t[]>(new size_t[kMemKinds]());
};

// What a backend is built from (registry.h make_backend).
struct BackendConfig {
    const HParams* hp;
    ThreadPool* pool;        // the CPU's threads
    Isa isa;
    Numerics numerics;
    Placement placement;     // set by make_backend: the backend's own
};

}  // namespace lll
