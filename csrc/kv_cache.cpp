// kv_cache.cpp — paged KV storage (see kv_cache.h).
#include "kv_cache.h"
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace lll {

size_t KVCache::layer_bytes(int64_t n_blocks, int block_size, int64_t kv_width) {
    return 2 * (size_t)n_blocks * (size_t)block_size * (size_t)kv_width * sizeof(fp16_t);
}

KVCache::KVCache(const std::vector<Backend*>& layer_backends, int64_t n_blocks, int block_size, int64_t kv_width)
    : backends_(layer_backends), n_blocks_(n_blocks), block_size_(block_size), kv_width_(kv_width) {
    const int n_layer = (int)layer_backends.size();
    if (n_layer <= 0 || n_blocks <= 0 || block_size <= 0 || kv_width <= 0)
        throw std::invalid_argument("kv cache: n_blocks and block_size must be positive (got n_blocks=" +
                                    std::to_string(n_blocks) + ", block_size=" + std::to_string(block_size) + ")");
    // Refused before allocating when the host's share cannot fit: more than the machine's memory
    // would end in the OOM killer, not an error (a device backend's alloc reports its own OOM).
    int host_layers = 0;
    for (const Backend* b : layer_backends) host_layers += b->placement() == Placement::CPU;
    const double bytes = (double)host_layers * (double)layer_bytes(n_blocks, block_size, kv_width);
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (bytes > ram)
        throw std::invalid_argument("kv cache: " + std::to_string((long long)(bytes / (1 << 20))) +
                                    " MiB for K and V exceeds this machine's memory (" +
                                    std::to_string((long long)(ram / (1 << 20))) +
                                    " MiB); reduce n_ctx or kv blocks");
    const size_t half = layer_bytes(n_blocks, block_size, kv_width) / 2;
    for (int l = 0; l < n_layer; ++l) {
        storage_.push_back(backends_[l]->alloc(2 * half, MemKind::KV, "KV cache of layer " + std::to_string(l)));
        k_.push_back(reinterpret_cast<fp16_t*>(storage_.back()->data()));
        v_.push_back(reinterpret_cast<fp16_t*>(storage_.back()->data() + half));
    }
}

size_t KVCache::bytes() const {
    size_t total = 0;
    for (const auto& b : storage_) total += b->bytes();
    return total;
}

void KVCache::copy_block(int64_t src, int64_t dst) {
    if (src < 0 || src >= n_blocks_ || dst < 0 || dst >= n_blocks_)
        throw std::invalid_argument("kv cache: copy_block(" + std::to_string(src) + ", " + std::to_string(dst) +
                                    "): block ids must be in [0, " + std::to_string(n_blocks_) + ")");
    const size_t block_bytes = (size_t)block_size_ * kv_width_ * sizeof(fp16_t);
    for (size_t l = 0; l < backends_.size(); ++l) {
        backends_[l]->copy(k_slot((int)l, dst, 0), k_slot((int)l, src, 0), block_bytes);
        backends_[l]->copy(v_slot((int)l, dst, 0), v_slot((int)l, src, 0), block_bytes);
    }
}

}  // namespace lll
