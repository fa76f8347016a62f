// kv_cache.h — paged KV storage: fixed-size blocks of token slots, addressed through block tables.
//
// Storage only: which block belongs to which sequence (allocation, sharing, prefix reuse) is the
// block manager's business (python/localllm/kv_blocks.py). Keys and values are kept in F16, as
// llama.cpp's default cache is, so attention sees the same rounded values.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <vector>
#include "blocks.h"
#include "tensor.h"

namespace lll {

class KVCache {
public:
    // n_blocks blocks of block_size token slots, each slot holding kv_width = n_head_kv*head_dim
    // values of K and of V, for each of n_layer layers (all on the CPU today).
    KVCache(int n_layer, int64_t n_blocks, int block_size, int64_t kv_width);

    int64_t n_blocks() const { return n_blocks_; }
    int block_size() const { return block_size_; }
    int64_t kv_width() const { return kv_width_; }
    size_t bytes() const { return (k_.size() + v_.size()) * sizeof(fp16_t); }
    Placement placement(int layer) const { return placement_[layer]; }

    // Slot of (physical block, offset) in a layer: kv_width contiguous F16 values.
    fp16_t* k_slot(int layer, int64_t block, int off) { return &k_[index(layer, block, off)]; }
    fp16_t* v_slot(int layer, int64_t block, int off) { return &v_[index(layer, block, off)]; }
    const fp16_t* k_slot(int layer, int64_t block, int off) const { return &k_[index(layer, block, off)]; }
    const fp16_t* v_slot(int layer, int64_t block, int off) const { return &v_[index(layer, block, off)]; }

    // Copies every layer's slots of block `src` to block `dst` (copy-on-write).
    void copy_block(int64_t src, int64_t dst);

private:
    size_t index(int layer, int64_t block, int off) const {
        return (((size_t)layer * n_blocks_ + block) * block_size_ + off) * kv_width_;
    }
    int n_layer_;
    int64_t n_blocks_;
    int block_size_;
    int64_t kv_width_;
    std::vector<fp16_t> k_, v_;            // [n_layer][n_blocks][block_size][kv_width]
    std::vector<Placement> placement_;     // per layer
};

}  // namespace lll
