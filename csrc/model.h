// model.h — hyper-parameters, weights and the batched forward pass of a decoder-only model.
//
// An architecture (csrc/models/<arch>.cpp) contributes two things: how to read its
// hyper-parameters and weights from GGUF, and its per-layer forward. Both are registered in
// csrc/models/registry.cpp. Everything else (embedding, KV cache, attention, output head) is shared.
#pragma once
#include <stdint.h>
#include <atomic>
#include <memory>
#include <string>
#include <vector>
#include "gguf.h"
#include "kv_cache.h"
#include "matmul.h"
#include "quants.h"
#include "tensor.h"
#include "threadpool.h"

namespace lll {

enum class RopeStyle : int { Normal = 0, NeoX = 1 };   // adjacent pairs vs. halves of the head

// Which float rounding order the forward follows.
//  Fast:     this project's kernels: the block-sequential matmul (quants/bseq.h, AMX / VNNI
//            GEMMs for prompts) and batch-invariant attention. A row's logits never depend on
//            the batch around it.
//  LlamaCpp: llama.cpp's x86 CPU order, op for op (ggml_math.h): legacy-type matmuls with
//            ggml's 8 lane accumulators (quants/ggml_legacy.h) and attention with the kernel
//            llama.cpp picks for the batch's size (attention_ggml.cpp). Logits match llama.cpp's
//            bit for bit where every op is covered; prompts run slower, and a row's attention
//            depends on whether its batch has one token or more, as in llama.cpp.
enum class Numerics : int { Fast = 0, LlamaCpp = 1 };

struct HParams {
    std::string arch;
    int n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
    int n_vocab = 0, n_ctx_train = 0;
    float norm_eps = 1e-5f;
    RopeStyle rope_style = RopeStyle::Normal;
    int rope_dims = 0;                    // leading dims of a head that are rotated
    float rope_base = 10000.f;            // global layers
    float rope_base_swa = 10000.f;        // sliding-window layers
    int n_swa = 0;                        // sliding window (tokens), 0 = none
    std::vector<uint8_t> layer_is_swa;    // per layer
    float attn_scale = 0.f;               // applied to the q.k scores (llama) ...
    float q_scale = 1.f;                  // ... or to q after RoPE (gemma)
    float embd_scale = 1.f;               // token embeddings are multiplied by this (gemma)
};

struct LayerWeights {
    WeightRef attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, attn_post_norm;
    WeightRef ffn_norm, w_gate, w_up, w_down, ffn_post_norm;
};

struct ModelWeights {
    WeightRef tok_embd, output_norm, output;  // output may alias tok_embd (tied)
    std::vector<LayerWeights> layers;
};

// One forward call: T tokens, possibly from several sequences. Tokens of one sequence are
// contiguous with increasing positions; each attends to positions [0, pos] of its own sequence
// through that sequence's block table (K/V of this batch are written to the cache first).
struct Batch {
    const int32_t* tokens = nullptr;       // [T]
    const int32_t* positions = nullptr;    // [T]
    const int32_t* seq_of_token = nullptr; // [T] index into block_tables
    int64_t n_tokens = 0;
    const int32_t* block_tables = nullptr; // [n_seqs, max_blocks] physical block ids
    int64_t n_seqs = 0, max_blocks = 0;
    const int32_t* output_rows = nullptr;  // [n_out] token rows whose logits are wanted
    int64_t n_out = 0;
};

class Model;

// Per-architecture hooks, registered by name in csrc/models/registry.cpp.
struct ArchSpec {
    const char* name;
    void (*load_hparams)(const GGUFFile& f, HParams& hp);
    void (*load_weights)(const Model& m, ModelWeights& w);
    // x[T, n_embd] in place: one transformer block (uses the model's scratch buffers).
    void (*layer_forward)(Model& m, int il, float* x, int64_t T, const Batch& batch);
};
const ArchSpec* find_arch(const std::string& name);   // nullptr when unsupported
std::string supported_archs();                         // "gemma3, llama, qwen2"

class Model {
public:
    Model(const std::string& path, int n_threads, int64_t kv_blocks, int kv_block_size,
          Numerics numerics = Numerics::Fast);
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;
    const HParams& hparams() const { return hp_; }
    const GGUFFile& file() const { return *file_; }
    std::shared_ptr<GGUFFile> file_ptr() const { return file_; }
    KVCache& kv() { return *kv_; }
    ThreadPool& pool() { return *pool_; }
    Isa isa() const { return isa_; }
    Numerics numerics() const { return numerics_; }
    // This matrix runs a llama.cpp-order kernel (numerics LlamaCpp and a kernel for its type).
    bool llamacpp_kernel(const WeightRef& w) const;
    const ModelWeights& weights() const { return w_; }

    // Runs the batch; writes n_out rows of n_vocab logits to `logits`.
    void forward(const Batch& batch, float* logits);
    // Set while a Python caller runs forward or copy_block: the binding refuses a second thread
    // (scratch buffers, rope cache, KV cache and pool serve one call at a time).
    std::atomic<bool> in_use{false};

    // Lookup by GGUF name with shape checks; `required` false returns an absent ref.
    WeightRef weight(const std::string& name, int64_t ne0, int64_t ne1, bool required = true) const;

    // Scratch buffers of the forward, sized for the largest batch seen (grown, never shrunk).
    struct Scratch {
        std::vector<float> x, h, q, k, v, attn, gate, up, tmp;   // [T, width] activations
        std::vector<uint8_t> xq;                              // quantized activations
    } s;
    // The rope table (ops.h) of these positions and base: made by the forward's first layer
    // with that base, reused by the others (Gemma3 alternates two bases).
    const float* rope_cs(const int32_t* positions, int64_t T, float base);
    void reserve_scratch(int64_t T);

private:
    std::shared_ptr<GGUFFile> file_;
    const ArchSpec* arch_ = nullptr;
    HParams hp_;
    ModelWeights w_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<KVCache> kv_;
    std::unique_ptr<HugeBuffer> repacked_;   // the repacked matrices, one arena
    void repack_layer_weights();
    std::vector<WeightRef*> matrices();      // every matrix multiplied: the output and the layers'
    std::vector<float> vector_copies_;       // norm weights and biases, out of the mapping
    void copy_vector_weights();
    std::string path_;
    int embd_fd_ = -1;                        // >= 0: token rows are read with pread (see .cpp)
    uint64_t embd_offset_ = 0;
    void embed_tokens_pread(const int32_t* tokens, int64_t T, float* out);
    Isa isa_;
    Numerics numerics_ = Numerics::Fast;
    int64_t scratch_T_ = 0;
    struct RopeCache {
        float base = 0.0f;
        std::vector<int32_t> positions;
        std::vector<float> cs;
    } rope_cache_[2];
    int rope_cache_next_ = 0;
};

}  // namespace lll
