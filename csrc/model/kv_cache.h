// kv_cache.h — paged KV storage: fixed-size blocks of token slots, addressed through block tables.
//
// Storage only: which block belongs to which sequence (allocation, sharing, prefix reuse) is the
// block manager's business (python/localllm/kv_blocks.py). Keys and values are kept in F16 by
// default, as llama.cpp's default cache is, so attention sees the same rounded values; either
// can be stored in Q8_0 or Q4_0 instead (llama.cpp's --cache-type-k / --cache-type-v), each
// slot's row quantized in blocks of 32 as ggml's CPU backend quantizes a cache row, after the
// Walsh-Hadamard rotation llama.cpp applies to a quantized cache's rows (see rot_k). Each layer's
// blocks live on that layer's backend (allocated through it); block ids mean the same in every
// layer, so one block table serves all backends.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <memory>
#include <string>
#include <vector>
#include "backends/backend.h"
#include "common/blocks.h"
#include "model/tensor.h"

namespace lll {

// The storage types of the cached keys and values.
struct KVTypes {
    GGMLType k = GGMLType::F16, v = GGMLType::F16;
};
// llama.cpp's cache type names, any case: "f16", "q8_0", "q4_0"; invalid_argument otherwise.
GGMLType parse_cache_type(const std::string& name);
const char* cache_type_name(GGMLType type);   // "f16", "q8_0", "q4_0"
// Throws invalid_argument naming the problem when a cache of these types cannot hold heads of
// head_dim values: a quantized type needs head_dim to be a multiple of its 32-value block (a
// head's keys are dequantized on their own).
void check_kv_types(KVTypes types, int head_dim);

// x[len] -> H x in place, chunk by chunk, H the orthonormal n x n Walsh-Hadamard matrix in
// Sylvester order (symmetric, H H = I); n a power of two dividing len: the butterflies (a + b,
// a - b) stage by stage, then each value times hadamard_scale(n), float(1 / sqrt(n)).
void hadamard_rotate(float* x, int64_t len, int n);
float hadamard_scale(int n);

class KVCache {
public:
    // n_blocks blocks of block_size token slots, each slot holding kv_width = n_head_kv*head_dim
    // values of K and of V, for each layer; layer l's storage is allocated by layer_backends[l].
    KVCache(const std::vector<Backend*>& layer_backends, int64_t n_blocks, int block_size, int n_head_kv,
            int head_dim, KVTypes types = {});

    int64_t n_blocks() const { return n_blocks_; }
    int block_size() const { return block_size_; }
    int64_t kv_width() const { return kv_width_; }
    int n_head_kv() const { return n_head_kv_; }
    KVTypes types() const { return types_; }
    // A quantized cache stores keys and values rotated, as llama.cpp does (its attn_rot_k/_v;
    // LLAMA_ATTN_ROT_DISABLE off): an orthonormal rotation spreads a head's outlier channels over
    // the block, so the block's scale loses less. Keys: each head by the largest power-of-two
    // Hadamard (>= 64) dividing head_dim; queries get the same rotation, so q.k is unchanged.
    // Values: each 64-value chunk; the attention output is rotated back. 0 = not rotated (an f16
    // side, or head_dim not a multiple of 64).
    int rot_k() const { return rot_k_; }
    int rot_v() const { return rot_v_; }
    bool is_f16() const { return types_.k == GGMLType::F16 && types_.v == GGMLType::F16; }
    size_t bytes() const;                       // all layers, K and V
    // Bytes one layer's K and V take: the one formula the allocator and the planner share.
    static size_t layer_bytes(int64_t n_blocks, int block_size, int64_t kv_width, KVTypes types = {});
    Placement placement(int layer) const { return backends_[layer]->placement(); }

    // The head_dim F16 values of kv head `head` at slot (physical block, offset) of a layer, in
    // the memory of the layer's backend; only for an F16 side. Host layers keep each block's F16
    // rows head-major, [head][slot][head_dim]: the rows of one head that an attention tile reads
    // (up to a block's slots) are one contiguous run, which the hardware prefetchers follow,
    // instead of head_dim values out of every kv_width. Device layers keep slot-major rows
    // ([slot][head][head_dim]), as their kernels read them; quantized sides are slot-major too.
    const fp16_t* k_row(int layer, int64_t block, int off, int head) const {
        return (const fp16_t*)k_[layer] + f16_index(layer, false, block, off, (int64_t)head * head_dim_);
    }
    const fp16_t* v_row(int layer, int64_t block, int off, int head) const {
        return (const fp16_t*)v_[layer] + f16_index(layer, true, block, off, (int64_t)head * head_dim_);
    }
    // F16 values from one head's row at a slot to the same head's row at the next slot of the block.
    int64_t row_step(int layer, bool values) const { return head_major(layer, values) ? head_dim_ : kv_width_; }
    // Bytes of one slot's K row (values false) or V row, slot-major (quantized sides, device layers).
    size_t slot_row_bytes(bool values) const { return values ? v_row_ : k_row_; }
    // A device layer's K and V storage, slot-major (for that backend's kernels).
    fp16_t* k_data(int layer) const { return (fp16_t*)k_[layer]; }
    fp16_t* v_data(int layer) const { return (fp16_t*)v_[layer]; }
    // Host caches of any type: stores one token's k and v rows (kv_width floats each) in a slot,
    // rotated (rot_k, rot_v) and rounded or quantized to the cache's types ...
    void write(int layer, int64_t block, int off, const float* k, const float* v);
    // ... and reads n values from column col of a slot's K (values false) or V row as f32:
    // exactly the stored (rotated) values (col and n multiples of the type's block).
    void read(bool values, int layer, int64_t block, int off, int64_t col, int n, float* dst) const;

    // Copies every layer's slots of block `src` to block `dst` (copy-on-write), each on its backend.
    void copy_block(int64_t src, int64_t dst);

private:
    // Slot-major rows (quantized sides, device layers): one slot's kv_width values.
    const uint8_t* k_bytes(int layer, int64_t block, int off) const { return k_[layer] + slot(block, off) * k_row_; }
    const uint8_t* v_bytes(int layer, int64_t block, int off) const { return v_[layer] + slot(block, off) * v_row_; }
    uint8_t* k_bytes(int layer, int64_t block, int off) { return k_[layer] + slot(block, off) * k_row_; }
    uint8_t* v_bytes(int layer, int64_t block, int off) { return v_[layer] + slot(block, off) * v_row_; }
    size_t slot(int64_t block, int off) const { return (size_t)block * block_size_ + off; }
    bool head_major(int layer, bool values) const {
        return host_[layer] && (values ? types_.v : types_.k) == GGMLType::F16;
    }
    // Index of value `col` (of kv_width) of a slot's F16 row, in F16 values from the layer's start.
    size_t f16_index(int layer, bool values, int64_t block, int off, int64_t col) const {
        if (!head_major(layer, values)) return slot(block, off) * kv_width_ + col;
        const int64_t head = col / head_dim_;
        return (((size_t)block * n_head_kv_ + head) * block_size_ + off) * head_dim_ + col % head_dim_;
    }
    std::vector<Backend*> backends_;              // per layer
    int64_t n_blocks_;
    int block_size_;
    int64_t kv_width_;
    int n_head_kv_, head_dim_;
    KVTypes types_;
    std::vector<bool> host_;                        // per layer: on the CPU backend
    int rot_k_ = 0, rot_v_ = 0;
    size_t k_row_, v_row_;                          // bytes of one slot's K row and V row
    // Per layer: K, then V, each n_blocks blocks of block_size * k_row_ (v_row_) bytes: slot-major
    // [slot][kv_width], or head-major [n_head_kv][slot][head_dim] (host F16, see k_row).
    std::vector<std::unique_ptr<Buffer>> storage_;
    std::vector<uint8_t*> k_, v_;                   // per layer, into storage_
};

}  // namespace lll
