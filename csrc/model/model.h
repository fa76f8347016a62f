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
#include "backends/backend.h"
#include "gguf/gguf.h"
#include "model/activation_stats.h"
#include "model/kv_cache.h"
#include "backends/cpu/quants/quants.h"
#include "common/rope.h"
#include "model/tensor.h"
#include "common/threadpool.h"

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
    RopeScaling rope_scaling;             // global layers
    float rope_freq_scale_swa = 1.0f;     // sliding-window layers' freq_scale (llama.cpp: 1, Gemma 2: the global one)
    std::vector<float> rope_freq_factors; // rope_freqs.weight [rope_dims/2], empty when absent ...
    // ... or LongRoPE's pair (Phi-3 128k: rope_factors_long / _short.weight, [rope_dims/2] each);
    // select_context() makes one of them rope_freq_factors, as llama.cpp's get_rope_factors does.
    std::vector<float> rope_factors_long, rope_factors_short;
    int n_swa = 0;                        // sliding window (tokens), 0 = none
    std::vector<uint8_t> layer_is_swa;    // per layer
    float attn_scale = 0.f;               // applied to the q.k scores (llama) ...
    float q_scale = 1.f;                  // ... or to q after RoPE (gemma)
    float embd_scale = 1.f;               // token embeddings are multiplied by this (gemma)
    float attn_softcap = 0.f;             // attention scores soft-capped at this (gemma2), 0 = none
    float final_softcap = 0.f;            // logits soft-capped at this (gemma2), 0 = none
    // Encoders (bert, nomic-bert): q and k are rotated only where rope_positions (nomic-bert);
    // bert adds learned absolute position embeddings instead. n_type: token type rows (0 = none).
    bool rope_positions = true;
    int n_type = 0;
    // Mixture of experts (qwen3moe): experts per layer, experts each token uses, their FFN width.
    // 0 experts = a dense FFN of width n_ff.
    int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;

    // The FFN activation width: an expert's in a mixture-of-experts model (every layer is one), else the dense FFN's.
    int64_t ffn_width() const { return n_expert > 0 ? n_ff_exp : n_ff; }

    // LongRoPE: the long factors when a sequence's context exceeds the original one
    // (rope.scaling.original_context_length), else the short ones. No-op for other files.
    void select_context(int64_t n_ctx_seq) {
        if (rope_factors_long.empty()) return;
        rope_freq_factors = n_ctx_seq > rope_scaling.n_ctx_orig ? rope_factors_long : rope_factors_short;
    }

    // The angles of layer il's RoPE: its base; the file's scaling, with rope_freq_scale_swa on
    // sliding-window layers as llama.cpp has it; the frequency factors.
    RopeFreqs rope_freqs(int il) const {
        const bool swa = n_swa > 0 && layer_is_swa[il];
        RopeFreqs f{swa ? rope_base_swa : rope_base, rope_scaling,
                    rope_freq_factors.empty() ? nullptr : rope_freq_factors.data()};
        if (swa) f.scaling.freq_scale = rope_freq_scale_swa;
        return f;
    }
};

struct LayerWeights {
    WeightRef attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, attn_post_norm;
    WeightRef ffn_norm, w_gate, w_up, w_down, ffn_post_norm;
    // Mixture of experts: the router [n_embd -> n_expert] and, per expert, a view of its rows of
    // the file's 3-D ffn_{gate,up,down}_exps tensors (n_expert entries each; empty when dense).
    WeightRef ffn_gate_inp;
    std::vector<WeightRef> gate_exps, up_exps, down_exps;
    // Encoders (post-norm blocks with biases): attn_output.bias, the LayerNorm after attention
    // (attn_output_norm), the FFN's biases and the LayerNorm after the FFN (layer_output_norm).
    WeightRef bo, attn_out_norm, attn_out_norm_b, b_up, b_down, out_norm, out_norm_b;
};

struct ModelWeights {
    WeightRef tok_embd, output_norm, output;  // output may alias tok_embd (tied); absent for encoders
    std::vector<LayerWeights> layers;
    // Encoders: learned absolute positions (bert), token type rows, the LayerNorm of the input.
    WeightRef pos_embd, type_embd, embd_norm, embd_norm_b;
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
    const int32_t* token_types = nullptr;  // [T] segment of each token (encoders); null = all 0
};

class Model;

// What one layer's forward works with: the backend that runs it (its weights, KV blocks and
// scratch live there) and the layer's description.
struct LayerCtx {
    Backend& be;
    const HParams& hp;
    const LayerWeights& L;
    KVCache& kv;
    int il;
    const Batch& b;
    // What attention reads (bidirectional architectures: every token sees its whole sequence,
    // Model::bidirectional_view); null = b.
    const Batch* attn_view = nullptr;
    const Batch& attn_batch() const { return attn_view ? *attn_view : b; }
};

// Per-architecture hooks, registered by name in csrc/models/registry.cpp.
struct ArchSpec {
    const char* name;
    void (*load_hparams)(const GGUFFile& f, HParams& hp);
    // The weights of csrc/model/weights.h's list, plus what the architecture requires of them.
    void (*load_weights)(const GGUFFile& f, const HParams& hp, ModelWeights& w);
    // x[T, n_embd] in place (on c.be): one transformer block, through the backend's ops.
    void (*layer_forward)(const LayerCtx& c, float* x, int64_t T);
    // Encoders: every token attends to its whole sequence (no causal mask); the model has no
    // output head (hidden states only, Model::forward_hidden).
    bool bidirectional = false;
    // Optional: after the token embedding, on the CPU (positions, token types, input norm).
    void (*input_forward)(Backend& be, const HParams& hp, const ModelWeights& w, const Batch& b, float* x,
                          int64_t T) = nullptr;
};
const ArchSpec* find_arch(const std::string& name);   // nullptr when unsupported
// Hyper-parameters and weight views (checked, not read) of a GGUF: what loading and the
// planner both start from.
const ArchSpec* describe_model(const GGUFFile& f, HParams& hp, ModelWeights& w);
// The most layers of this model a GPU backend can run: mixture-of-experts layers (routing on the
// host) run on the CPU only, so 0 for a file with experts; else every layer.
int gpu_layers_max(const HParams& hp);
std::string supported_archs();                         // "gemma2, gemma3, llama, phi3, qwen2, qwen3, qwen3moe"

class Model {
public:
    // The last n_gpu_layers layers, and then the output head, run on the GPU backend (llama.cpp's
    // -ngl); the input embedding and the other layers on the CPU. n_ctx_seq: the longest sequence
    // the caller will run (LongRoPE's choice of factors; 0 = the pool, kv_blocks * kv_block_size).
    // offload: the device those layers run on (backends/registry.h resolve_offload).
    Model(const std::string& path, int n_threads, int64_t kv_blocks, int kv_block_size,
          Numerics numerics = Numerics::Fast, int n_gpu_layers = 0, KVTypes kv_types = {}, int64_t n_ctx_seq = 0,
          Placement offload = {});
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;
    const HParams& hparams() const { return hp_; }
    const GGUFFile& file() const { return *file_; }
    std::shared_ptr<GGUFFile> file_ptr() const { return file_; }
    KVCache& kv() { return *kv_; }
    Isa isa() const { return isa_; }
    Numerics numerics() const { return numerics_; }
    const ModelWeights& weights() const { return w_; }
    Backend& layer_backend(int il) const { return *layer_backend_[il]; }
    Backend& backend_at(Placement p) const;
    Backend& output_backend() const { return *output_backend_; }
    // The CPU threads the forward runs on (also lent to sample_rows between forwards).
    ThreadPool& pool() { return *pool_; }
    // The backends in use, the CPU first.
    std::vector<Backend*> backends() const;

    // Runs the batch; writes n_out rows of n_vocab logits to `logits` (host).
    void forward(const Batch& batch, float* logits);
    // Runs the batch; writes the n_out rows' final hidden states [n_out, n_embd] to `out` (host):
    // after the output norm where the model has one (decoders), the last layer's output else.
    void forward_hidden(const Batch& batch, float* out);
    // Both in one forward (the engine's steps that carry generation and embeddings): logits of
    // b.output_rows, and the final hidden states of hidden_rows [n_hidden] into hidden (host).
    void forward_mixed(const Batch& batch, float* logits, const int32_t* hidden_rows, int64_t n_hidden, float* hidden);
    // Whether the model can generate (has an output head): encoders cannot.
    bool has_output_head() const { return w_.output.present(); }
    bool bidirectional() const { return arch_->bidirectional; }
    // Collect llama-imatrix's activation statistics over the forwards from now on (a fresh set),
    // or stop and drop them. Refused (std::invalid_argument) where a layer runs on a backend that
    // cannot observe its matmuls (only the CPU's can).
    void collect_activations(bool on);
    // The statistics so far; nullptr when not collecting.
    const ActivationStats* activation_stats() const { return activation_stats_.get(); }
    // Scratch on every backend for batches of up to T tokens (forward grows it as needed).
    void reserve(int64_t T);
    // Set while a Python caller runs forward or copy_block: the binding refuses a second thread
    // (scratch buffers, rope cache, KV cache and pool serve one call at a time).
    std::atomic<bool> in_use{false};

private:
    std::shared_ptr<GGUFFile> file_;
    const ArchSpec* arch_ = nullptr;
    HParams hp_;
    ModelWeights w_;
    std::unique_ptr<ThreadPool> pool_;
    std::vector<std::unique_ptr<Backend>> backends_;   // CPU first; destroyed after what they hold
    LayerPlacement placement_;
    std::vector<Backend*> layer_backend_;              // per layer
    Backend* output_backend_ = nullptr;
    std::unique_ptr<KVCache> kv_;
    void place_weights();
    std::string path_;
    EmbeddingTable embd_;                     // the input embedding (always on the CPU)
    void move_activations(Backend& from, Backend& to, int64_t n);
    // Embedding and layers; returns the backend whose scratch x holds the last layer's output.
    Backend* run_layers(const Batch& b);
    // The final hidden states of `rows` (after the output norm where there is one) to host `out`.
    void copy_hidden(Backend& be, const Batch& b, const int32_t* rows, int64_t n, float* out);
    // For bidirectional architectures: b with every token at its sequence's last position, so
    // causal attention over [0, pos] sees the whole sequence.
    const Batch& bidirectional_view(const Batch& b);
    struct AttnView {
        Batch batch;
        std::vector<int32_t> positions;
    } view_;
    Isa isa_;
    Numerics numerics_ = Numerics::Fast;
    std::unique_ptr<ActivationStats> activation_stats_;
};

}  // namespace lll
