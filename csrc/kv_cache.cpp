// kv_cache.cpp — paged KV storage (see kv_cache.h).
#include "kv_cache.h"
#include <stdexcept>
#include <string>
#include <string.h>
#include <unistd.h>

namespace lll {

KVCache::KVCache(int n_layer, int64_t n_blocks, int block_size, int64_t kv_width)
    : n_layer_(n_layer), n_blocks_(n_blocks), block_size_(block_size), kv_width_(kv_width) {
    if (n_layer <= 0 || n_blocks <= 0 || block_size <= 0 || kv_width <= 0)
        throw std::invalid_argument("kv cache: n_blocks and block_size must be positive (got n_blocks=" +
                                    std::to_string(n_blocks) + ", block_size=" + std::to_string(block_size) + ")");
    // Refused before allocating when it cannot fit: zero-filling more than the machine's memory
    // would end in the OOM killer, not an error.
    const double bytes = 2.0 * n_layer * (double)n_blocks * block_size * kv_width * sizeof(fp16_t);
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (bytes > ram)
        throw std::invalid_argument("kv cache: " + std::to_string((long long)(bytes / (1 << 20))) +
                                    " MiB for K and V exceeds this machine's memory (" +
                                    std::to_string((long long)(ram / (1 << 20))) +
                                    " MiB); reduce n_ctx or kv blocks");
    const size_t n = (size_t)n_layer * n_blocks * block_size * kv_width;
    k_.assign(n, 0);
    v_.assign(n, 0);
    placement_.assign(n_layer, Placement::CPU);
}

void KVCache::copy_block(int64_t src, int64_t dst) {
    if (src < 0 || src >= n_blocks_ || dst < 0 || dst >= n_blocks_)
        throw std::invalid_argument("kv cache: copy_block(" + std::to_string(src) + ", " + std::to_string(dst) +
                                    "): block ids must be in [0, " + std::to_string(n_blocks_) + ")");
    const size_t block_elems = (size_t)block_size_ * kv_width_;
    for (int l = 0; l < n_layer_; ++l) {
        memcpy(k_slot(l, dst, 0), k_slot(l, src, 0), block_elems * sizeof(fp16_t));
        memcpy(v_slot(l, dst, 0), v_slot(l, src, 0), block_elems * sizeof(fp16_t));
    }
}

}  // namespace lll
