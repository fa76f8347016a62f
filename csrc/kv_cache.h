// kv_cache.h — paged KV storage: fixed-size blocks of token slots, addressed through block tables.
//
// Storage only: which block belongs to which sequence (allocation, sharing, prefix reuse) is the
// block manager's business (python/localllm/kv_blocks.py). Keys and values are kept in F16, as
// llama.cpp's default cache is, so attention sees the same rounded values. Each layer's blocks
// live on that layer's backend (allocated through it); block ids mean the same in every layer,
// so one block table serves all backends.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <memory>
#include <vector>
#include "backend.h"
#include "blocks.h"
#include "tensor.h"

namespace lll {

class KVCache {
public:
    // n_blocks blocks of block_size token slots, each slot holding kv_width = n_head_kv*head_dim
    // values of K and of V, for each layer; layer l's storage is allocated by layer_backends[l].
    KVCache(const std::vector<Backend*>& layer_backends, int64_t n_blocks, int block_size, int64_t kv_width);

    int64_t n_blocks() const { return n_blocks_; }
    int block_size() const { return block_size_; }
    int64_t kv_width() const { return kv_width_; }
    size_t bytes() const;                       // all layers, K and V
    // Bytes one layer's K and V take: the one formula the allocator and the planner share.
    static size_t layer_bytes(int64_t n_blocks, int block_size, int64_t kv_width);
    Placement placement(int layer) const { return backends_[layer]->placement(); }

    // Slot of (physical block, offset) in a layer: kv_width contiguous F16 values, in the
    // memory of the layer's backend.
    fp16_t* k_slot(int layer, int64_t block, int off) { return k_[layer] + index(block, off); }
    fp16_t* v_slot(int layer, int64_t block, int off) { return v_[layer] + index(block, off); }
    const fp16_t* k_slot(int layer, int64_t block, int off) const { return k_[layer] + index(block, off); }
    const fp16_t* v_slot(int layer, int64_t block, int off) const { return v_[layer] + index(block, off); }

    // Copies every layer's slots of block `src` to block `dst` (copy-on-write), each on its backend.
    void copy_block(int64_t src, int64_t dst);

private:
    size_t index(int64_t block, int off) const { return ((size_t)block * block_size_ + off) * kv_width_; }
    std::vector<Backend*> backends_;              // per layer
    int64_t n_blocks_;
    int block_size_;
    int64_t kv_width_;
    std::vector<std::unique_ptr<Buffer>> storage_;  // per layer: K [n_blocks][block_size][kv_width], then V
    std::vector<fp16_t*> k_, v_;                    // per layer, into storage_
};

}  // namespace lll
