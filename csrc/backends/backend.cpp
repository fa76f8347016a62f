// backend.cpp — what every backend shares: tracked allocation and the scratch layout.
#include "backends/backend.h"
#include "backends/registry.h"
#include "model/model.h"
#include <new>
#include <stdexcept>

namespace lll {

bool Backend::host_memory() const { return backend_info(placement_).host; }

const char* mem_kind_name(MemKind k) {
    switch (k) {
        case MemKind::Weights: return "weights";
        case MemKind::KV: return "KV cache";
        case MemKind::Scratch: return "scratch";
    }
    return "?";
}

namespace {
// A backend's buffer that gives its bytes back to the backend's count when released.
class TrackedBuffer : public Buffer {
public:
    TrackedBuffer(std::unique_ptr<Buffer> inner, std::shared_ptr<size_t[]> counts, MemKind kind, size_t bytes)
        : inner_(std::move(inner)), counts_(std::move(counts)), kind_(kind) {
        data_ = inner_->data();
        bytes_ = bytes;
        counts_[(int)kind_] += bytes_;
    }
    ~TrackedBuffer() override { counts_[(int)kind_] -= bytes_; }
private:
    std::unique_ptr<Buffer> inner_;
    std::shared_ptr<size_t[]> counts_;
    MemKind kind_;
};
}  // namespace

size_t Backend::device_memory() const {
    size_t total = 0;
    for (int k = 0; k < kMemKinds; ++k) total += allocated_[k];
    return total;
}

std::unique_ptr<Buffer> Backend::alloc(size_t bytes, MemKind kind, const std::string& what) {
    std::unique_ptr<Buffer> raw;
    try {
        raw = alloc_raw(bytes, kind);
    } catch (const std::bad_alloc&) {
        raw.reset();
    }
    if (!raw)
        throw std::runtime_error(std::string(name()) + " out of memory: " + what + " (" + mem_kind_name(kind) +
                                 ") needs " + std::to_string(bytes) + " bytes");
    return std::make_unique<TrackedBuffer>(std::move(raw), allocated_, kind, bytes);
}

ActScratch layout_act_scratch(const HParams& hp, int64_t T, float* base) {
    const int64_t q_width = (int64_t)hp.n_head * hp.head_dim;
    const int64_t kv_width = (int64_t)hp.n_head_kv * hp.head_dim;
    ActScratch s;
    float* p = base;
    auto take = [&](int64_t width) { float* r = p; p += T * width; return r; };
    s.x = take(hp.n_embd);
    s.h = take(hp.n_embd);
    s.tmp = take(hp.n_embd);
    s.q = take(q_width);
    s.attn = take(q_width);
    s.k = take(kv_width);
    s.v = take(kv_width);
    s.gate = take(hp.ffn_width());
    s.up = take(hp.ffn_width());
    if (hp.n_expert > 0) {
        s.router = take(hp.n_expert);
        s.moe_x = take(hp.n_embd);
        s.moe_y = take(hp.n_embd);
        s.moe_acc = take((int64_t)hp.n_expert_used * hp.n_embd);
    }
    return s;
}

void Backend::layer_norm(const float*, const WeightRef&, const WeightRef&, float*, int64_t, int64_t, float) {
    throw std::logic_error(std::string("the ") + name() + " backend has no layer_norm (encoders run on the CPU)");
}

void Backend::gelu(float*, int64_t) {
    throw std::logic_error(std::string("the ") + name() + " backend has no gelu (encoders run on the CPU)");
}

}  // namespace lll
