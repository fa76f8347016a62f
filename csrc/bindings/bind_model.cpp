// bind_model.cpp — Python face of the forward pass: `_core.Model`.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <algorithm>
#include <stdexcept>
#include <string>
#include "backends/registry.h"
#include "model/footprint.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "model/weights.h"

namespace py = pybind11;
using namespace lll;

using I32 = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

static py::dict hparams_dict(const HParams& hp) {
    py::dict d;
    d["arch"] = hp.arch; d["n_layer"] = hp.n_layer; d["n_embd"] = hp.n_embd; d["n_ff"] = hp.n_ff;
    d["n_expert"] = hp.n_expert; d["n_expert_used"] = hp.n_expert_used; d["n_ff_exp"] = hp.n_ff_exp;
    d["n_head"] = hp.n_head; d["n_head_kv"] = hp.n_head_kv; d["head_dim"] = hp.head_dim;
    d["n_vocab"] = hp.n_vocab; d["n_ctx_train"] = hp.n_ctx_train; d["norm_eps"] = hp.norm_eps;
    d["rope_base"] = hp.rope_base; d["rope_base_swa"] = hp.rope_base_swa; d["rope_dims"] = hp.rope_dims;
    d["rope_style"] = hp.rope_style == RopeStyle::NeoX ? "neox" : "normal";
    d["n_swa"] = hp.n_swa;
    d["n_type"] = hp.n_type;
    return d;
}

// Every index the forward will follow is checked here, so bad input raises instead of crashing.
static void validate_batch(Model& m, const Batch& b) {
    const HParams& hp = m.hparams();
    const int bs = m.kv().block_size();
    std::vector<int32_t> max_pos(b.n_seqs, -1);
    for (int64_t t = 0; t < b.n_tokens; ++t) {
        if (b.tokens[t] < 0 || b.tokens[t] >= hp.n_vocab)
            throw std::invalid_argument("token id " + std::to_string(b.tokens[t]) + " out of range [0, " +
                                        std::to_string(hp.n_vocab) + ")");
        const int32_t s = b.seq_of_token[t];
        if (s < 0 || s >= b.n_seqs) throw std::invalid_argument("seq index " + std::to_string(s) + " out of range");
        const int32_t p = b.positions[t];
        if (p < 0 || p >= b.max_blocks * bs)
            throw std::invalid_argument("position " + std::to_string(p) + " beyond the block table (" +
                                        std::to_string(b.max_blocks * bs) + " slots)");
        max_pos[s] = std::max(max_pos[s], p);
    }
    for (int64_t s = 0; s < b.n_seqs; ++s)
        for (int64_t j = 0; j <= (int64_t)max_pos[s] / bs && max_pos[s] >= 0; ++j) {
            const int32_t blk = b.block_tables[s * b.max_blocks + j];
            if (blk < 0 || blk >= m.kv().n_blocks())
                throw std::invalid_argument("block id " + std::to_string(blk) + " out of range [0, " +
                                            std::to_string(m.kv().n_blocks()) + ")");
        }
    for (int64_t r = 0; r < b.n_out; ++r)
        if (b.output_rows[r] < 0 || b.output_rows[r] >= b.n_tokens)
            throw std::invalid_argument("output row " + std::to_string(b.output_rows[r]) + " out of range");
}

// Holds Model::in_use for one call. A second thread gets a clear error instead of sharing the
// scratch buffers and KV cache mid-call (the engine drives a model from one thread).
class ModelInUse {
public:
    explicit ModelInUse(Model& m, const char* what) : m_(m) {
        if (m_.in_use.exchange(true))
            throw std::runtime_error(std::string("Model.") + what +
                                     ": the model is already running a call in another thread "
                                     "(a Model serves one forward at a time)");
    }
    ~ModelInUse() { m_.in_use.store(false); }
    ModelInUse(const ModelInUse&) = delete;
    ModelInUse& operator=(const ModelInUse&) = delete;

private:
    Model& m_;
};

// The batch of a forward call from its arrays, checked (validate_batch).
static Batch make_batch(Model& m, const I32& tokens, const I32& positions, const I32& seq_of_token,
                        const I32& block_tables, const I32& output_rows) {
    if (tokens.ndim() != 1 || positions.ndim() != 1 || seq_of_token.ndim() != 1 || output_rows.ndim() != 1)
        throw std::invalid_argument("tokens, positions, seq_of_token and output_rows must be 1-D");
    if (block_tables.ndim() != 2) throw std::invalid_argument("block_tables must be 2-D [n_seqs, max_blocks]");
    const int64_t T = tokens.shape(0);
    if (T == 0) throw std::invalid_argument("empty batch");
    if (positions.shape(0) != T || seq_of_token.shape(0) != T)
        throw std::invalid_argument("tokens, positions and seq_of_token must have the same length");
    Batch b;
    b.tokens = tokens.data(); b.positions = positions.data(); b.seq_of_token = seq_of_token.data();
    b.n_tokens = T;
    b.block_tables = block_tables.data(); b.n_seqs = block_tables.shape(0); b.max_blocks = block_tables.shape(1);
    b.output_rows = output_rows.data(); b.n_out = output_rows.shape(0);
    validate_batch(m, b);
    return b;
}

static py::array_t<float> forward(Model& m, I32 tokens, I32 positions, I32 seq_of_token,
                                  I32 block_tables, I32 output_rows, py::object out_obj) {
    const Batch b = make_batch(m, tokens, positions, seq_of_token, block_tables, output_rows);
    const int64_t n_vocab = m.hparams().n_vocab;
    py::array_t<float> logits;
    if (out_obj.is_none()) {
        logits = py::array_t<float>({b.n_out, n_vocab});
    } else {   // the caller's buffer (the engine reuses one: a fresh 16 x 262k array per step
               // costs a page-fault and clearing pass over 16 MB)
        if (!py::isinstance<py::array_t<float>>(out_obj))
            throw std::invalid_argument("out must be a float32 array");
        logits = out_obj.cast<py::array_t<float>>();
        if (logits.ndim() != 2 || logits.shape(0) != b.n_out || logits.shape(1) != n_vocab ||
            !(logits.flags() & py::array::c_style) || !logits.writeable())
            throw std::invalid_argument("out must be a writeable C-contiguous float32 array of shape [" +
                                        std::to_string(b.n_out) + ", " + std::to_string(n_vocab) + "]");
    }
    float* out = logits.mutable_data();
    {
        ModelInUse guard(m, "forward");
        py::gil_scoped_release release;
        m.forward(b, out);
    }
    return logits;
}

// Model.forward_hidden: the final hidden states of the output rows (embeddings, before pooling).
static py::array_t<float> forward_hidden(Model& m, I32 tokens, I32 positions, I32 seq_of_token, I32 block_tables,
                                         I32 output_rows, py::object token_types_obj) {
    Batch b = make_batch(m, tokens, positions, seq_of_token, block_tables, output_rows);
    I32 token_types;
    if (!token_types_obj.is_none()) {
        token_types = token_types_obj.cast<I32>();
        if (token_types.ndim() != 1 || token_types.shape(0) != b.n_tokens)
            throw std::invalid_argument("token_types must be 1-D with one entry per token");
        b.token_types = token_types.data();
    }
    py::array_t<float> hidden({b.n_out, (int64_t)m.hparams().n_embd});
    float* out = hidden.mutable_data();
    {
        ModelInUse guard(m, "forward_hidden");
        py::gil_scoped_release release;
        m.forward_hidden(b, out);
    }
    return hidden;
}

// Model.forward_mixed: logits of output_rows and hidden states of hidden_rows from one forward.
static py::tuple forward_mixed(Model& m, I32 tokens, I32 positions, I32 seq_of_token, I32 block_tables,
                               I32 output_rows, I32 hidden_rows) {
    const Batch b = make_batch(m, tokens, positions, seq_of_token, block_tables, output_rows);
    if (hidden_rows.ndim() != 1) throw std::invalid_argument("hidden_rows must be 1-D");
    const int64_t n_hidden = hidden_rows.shape(0);
    for (int64_t r = 0; r < n_hidden; ++r)
        if (hidden_rows.data()[r] < 0 || hidden_rows.data()[r] >= b.n_tokens)
            throw std::invalid_argument("hidden row " + std::to_string(hidden_rows.data()[r]) + " out of range");
    py::array_t<float> logits({b.n_out, (int64_t)m.hparams().n_vocab});
    py::array_t<float> hidden({n_hidden, (int64_t)m.hparams().n_embd});
    float* lp = logits.mutable_data();
    float* hp = hidden.mutable_data();
    {
        ModelInUse guard(m, "forward_mixed");
        py::gil_scoped_release release;
        m.forward_mixed(b, lp, hidden_rows.data(), n_hidden, hp);
    }
    return py::make_tuple(logits, hidden);
}

// The token bitmasks of sample_rows: masks uint32[n_masks, ceil(n_vocab / 32)] (or None) and
// the mask row of each sampler (-1: unconstrained), checked before any pointer is used.
struct MaskRows {
    py::array_t<uint32_t, py::array::c_style | py::array::forcecast> array;
    const uint32_t* words = nullptr;
};

static MaskRows check_masks(const py::object& masks, const std::vector<int64_t>& mask_rows, int n, int64_t n_vocab) {
    MaskRows out;
    if (masks.is_none()) {
        if (!mask_rows.empty()) throw std::invalid_argument("sample_rows: mask_rows given without masks");
        return out;
    }
    out.array = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>::ensure(masks);
    if (!out.array || out.array.ndim() != 2 || out.array.shape(1) != lll::mask_words(n_vocab))
        throw std::invalid_argument("sample_rows: masks must be a 2-D uint32 array [n_masks, " +
                                    std::to_string(lll::mask_words(n_vocab)) + "] (ceil(n_vocab / 32) words)");
    if (static_cast<int>(mask_rows.size()) != n)
        throw std::invalid_argument("sample_rows: " + std::to_string(mask_rows.size()) + " mask_rows for " +
                                    std::to_string(n) + " samplers");
    for (int64_t r : mask_rows)
        if (r < -1 || r >= out.array.shape(0))
            throw std::invalid_argument("sample_rows: mask row " + std::to_string(r) + " out of range [-1, " +
                                        std::to_string(out.array.shape(0)) + ")");
    out.words = out.array.data();
    return out;
}

// Model.sample_rows: one draw per row on the model's threads (see lll::sample_rows); the
// engine's step samples all its sequences with one call instead of one call (and one GIL
// hand-over) per sequence.
static py::tuple sample_rows_py(Model& m, const std::vector<Sampler*>& samplers,
                                const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
                                const std::vector<int64_t>& rows, bool accept, const py::object& masks,
                                const std::vector<int64_t>& mask_rows) {
    const int n = static_cast<int>(samplers.size());
    if (rows.size() != samplers.size())
        throw std::invalid_argument("sample_rows: " + std::to_string(rows.size()) + " rows for " +
                                    std::to_string(n) + " samplers");
    if (logits.ndim() != 2) throw std::invalid_argument("sample_rows: logits must be 2-D [n_rows, n_vocab]");
    const int64_t n_vocab = logits.shape(1);
    std::vector<Sampler*> seen(samplers);
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
        throw std::invalid_argument("sample_rows: a sampler appears twice (one sampler per row)");
    for (int i = 0; i < n; ++i) {
        if (samplers[i] == nullptr) throw std::invalid_argument("sample_rows: sampler " + std::to_string(i) + " is None");
        if (samplers[i]->n_vocab() != n_vocab)
            throw std::invalid_argument("sample_rows: sampler " + std::to_string(i) + " has n_vocab=" +
                                        std::to_string(samplers[i]->n_vocab()) + ", the logits " +
                                        std::to_string(n_vocab));
        if (rows[i] < 0 || rows[i] >= logits.shape(0))
            throw std::invalid_argument("sample_rows: row " + std::to_string(rows[i]) + " out of range [0, " +
                                        std::to_string(logits.shape(0)) + ")");
    }
    const MaskRows mask = check_masks(masks, mask_rows, n, n_vocab);
    std::vector<int> tokens(n);
    std::vector<std::string> errors(n);
    {
        ModelInUse guard(m, "sample_rows");
        py::gil_scoped_release release;
        sample_rows(m.pool(), samplers.data(), logits.data(), n_vocab, rows.data(), n, accept, tokens.data(),
                    errors.data(), mask.words, mask.words ? mask_rows.data() : nullptr);
    }
    py::list errs;
    for (const std::string& e : errors) errs.append(e.empty() ? py::object(py::none()) : py::object(py::str(e)));
    return py::make_tuple(tokens, errs);
}

static Numerics parse_numerics(const std::string& numerics) {
    if (numerics != "fast" && numerics != "llama.cpp")
        throw std::invalid_argument("numerics must be 'fast' or 'llama.cpp', not '" + numerics + "'");
    return numerics == "fast" ? Numerics::Fast : Numerics::LlamaCpp;
}

static py::dict allocated_dict(const Model& self) {
    py::dict d;
    for (Backend* be : self.backends()) {
        py::dict kinds;
        kinds["weights"] = be->allocated(MemKind::Weights);
        kinds["kv"] = be->allocated(MemKind::KV);
        kinds["scratch"] = be->allocated(MemKind::Scratch);
        d[be->name()] = kinds;
    }
    return d;
}

// The planner's view of a model file: its weights' views (checked, not read), and the bytes
// each backend would allocate for a placement (footprint.h), without loading anything.
class Footprint {
public:
    Footprint(const std::string& path, Numerics numerics)
        : file_(GGUFFile::open(path)), numerics_(numerics), isa_(best_isa()) {
        describe_model(*file_, hp_, w_);
    }
    int n_layer() const { return hp_.n_layer; }
    int gpu_layers_max() const { return lll::gpu_layers_max(hp_); }
    py::dict bytes(int n_gpu_layers, int64_t kv_blocks, int kv_block_size, int64_t n_batch,
                   const std::string& cache_type_k, const std::string& cache_type_v, const std::string& device) {
        if (kv_blocks < 1 || kv_block_size < 1 || n_batch < 1)
            throw std::invalid_argument("kv_blocks, kv_block_size and n_batch must be >= 1");
        const KVTypes types{parse_cache_type(cache_type_k), parse_cache_type(cache_type_v)};
        check_kv_types(types, hp_.head_dim);
        const LayerPlacement lp = place_layers(hp_.n_layer, n_gpu_layers, resolve_offload(device));
        py::dict d;
        for (Placement p : placements_used(lp)) {
            const DeviceBytes b = device_bytes(p, hp_, weights_on(w_, lp, p), kv_blocks, kv_block_size, types, n_batch,
                                               isa_, numerics_);
            py::dict kinds;
            kinds["weights"] = b.weights;
            kinds["kv"] = b.kv;
            kinds["scratch"] = b.scratch;
            d[placement_name(p)] = kinds;
        }
        return d;
    }
private:
    std::shared_ptr<GGUFFile> file_;
    Numerics numerics_;
    Isa isa_;
    HParams hp_;
    ModelWeights w_;
};

// Model::activation_stats as numpy copies (None when not collecting).
static py::object activation_stats_py(const Model& self) {
    const ActivationStats* stats = self.activation_stats();
    if (!stats) return py::none();
    py::dict out;
    for (const auto& [name, e] : stats->entries()) {
        const py::ssize_t n_mat = (py::ssize_t)e.counts.size();
        py::array_t<float> sum2({n_mat, (py::ssize_t)e.n_cols});
        std::copy(e.sum2.begin(), e.sum2.end(), sum2.mutable_data());
        py::array_t<int64_t> counts(n_mat);
        std::copy(e.counts.begin(), e.counts.end(), counts.mutable_data());
        out[py::str(name)] = py::make_tuple(sum2, counts);
    }
    return out;
}

// The imatrix collector's entry points (localllm imatrix).
static void register_activation_stats(py::class_<Model>& model) {
    model
        .def("collect_activations", [](Model& self, bool on) {
            if (self.in_use.load()) throw std::runtime_error("collect_activations while a forward runs");
            self.collect_activations(on);
        }, py::arg("on"),
             "Start collecting llama-imatrix's activation statistics over the forwards (a fresh set), or stop "
             "(on=False) and drop them. Every layer must run on the CPU.")
        .def("activation_stats", &activation_stats_py,
             "{GGUF tensor name: (sum2 float32 [n_mat, n_cols], counts int64 [n_mat])} collected so far: per input "
             "column, the sum of squares of the matrix's float inputs, and the rows summed (n_mat = its experts, "
             "or 1). None when not collecting.");
}

static void register_footprint(py::module_& m) {
    py::class_<Footprint>(m, "Footprint", "The bytes each device would allocate for a model file (the planner's input).")
        .def(py::init([](const std::string& path, const std::string& numerics) {
                 return new Footprint(path, parse_numerics(numerics));
             }), py::arg("path"), py::arg("numerics") = "fast")
        .def_property_readonly("n_layer", &Footprint::n_layer)
        .def_property_readonly("gpu_layers_max", &Footprint::gpu_layers_max,
                               "The most layers a GPU can run (0 for mixture-of-experts models).")
        .def("bytes", &Footprint::bytes, py::arg("n_gpu_layers"), py::arg("kv_blocks"), py::arg("kv_block_size"),
             py::arg("n_batch"), py::arg("cache_type_k") = "f16", py::arg("cache_type_v") = "f16",
             py::arg("device") = "",
             "{device: {'weights', 'kv', 'scratch'}} for the last n_gpu_layers layers (and the output head) on "
             "the GPU, a pool of kv_blocks blocks and batches of up to n_batch tokens. device: the GPU's device "
             "string ('' = the automatic choice, 'Vulkan', 'CUDA:1', ...; resolve_device).");
}

void register_model(py::module_& m) {
    register_footprint(m);
    py::class_<Model> model(m, "Model", "A loaded model: weights mapped from GGUF, a paged KV cache, a thread pool.");
    model
        .def(py::init([](const std::string& path, int n_threads, int64_t kv_blocks, int kv_block_size,
                         const std::string& numerics, int n_gpu_layers, const std::string& cache_type_k,
                         const std::string& cache_type_v, int64_t n_ctx, const std::string& device) {
                 const Numerics n = parse_numerics(numerics);
                 const KVTypes types{parse_cache_type(cache_type_k), parse_cache_type(cache_type_v)};
                 const Placement offload = n_gpu_layers > 0 ? resolve_offload(device) : kHostPlacement;
                 py::gil_scoped_release release;
                 return new Model(path, n_threads, kv_blocks, kv_block_size, n, n_gpu_layers, types, n_ctx, offload);
             }),
             py::arg("path"), py::arg("n_threads"), py::arg("kv_blocks"), py::arg("kv_block_size") = 16,
             py::arg("numerics") = "fast", py::arg("n_gpu_layers") = 0, py::arg("cache_type_k") = "f16",
             py::arg("cache_type_v") = "f16", py::arg("n_ctx") = 0, py::arg("device") = "",
             "n_gpu_layers: the last n layers and the output head on the GPU (a build with a GPU backend); "
             "device: which ('' = the automatic choice, 'Vulkan', 'CUDA:1', ...; resolve_device). "
             "cache_type_k / cache_type_v: the KV cache's storage types, f16 (default), q8_0 or q4_0 "
             "(llama.cpp's --cache-type-k/-v; quantized types on the CPU with the fast numerics). "
             "n_ctx: the longest sequence to be run (LongRoPE files pick their long or short factors by it, "
             "as llama.cpp does by its per-sequence context; 0 = kv_blocks * kv_block_size).")
        .def_property_readonly("numerics", [](const Model& self) {
            return std::string(self.numerics() == Numerics::Fast ? "fast" : "llama.cpp");
        })
        .def_property_readonly("hparams", [](const Model& self) { return hparams_dict(self.hparams()); })
        .def_property_readonly("kv_blocks", [](Model& self) { return self.kv().n_blocks(); })
        .def_property_readonly("kv_block_size", [](Model& self) { return self.kv().block_size(); })
        .def_property_readonly("kv_bytes", [](Model& self) { return self.kv().bytes(); })
        .def_property_readonly("cache_type_k", [](Model& self) { return std::string(cache_type_name(self.kv().types().k)); })
        .def_property_readonly("cache_type_v", [](Model& self) { return std::string(cache_type_name(self.kv().types().v)); })
        .def_property_readonly("isa", [](const Model& self) { return isa_name(self.isa()); })
        .def("forward", &forward, py::arg("tokens"), py::arg("positions"), py::arg("seq_of_token"),
             py::arg("block_tables"), py::arg("output_rows"), py::arg("out") = py::none(),
             "Run one batch; returns float32 logits [len(output_rows), n_vocab] (written into `out` "
             "when given, a C-contiguous float32 array of that shape).")
        .def("forward_hidden", &forward_hidden, py::arg("tokens"), py::arg("positions"), py::arg("seq_of_token"),
             py::arg("block_tables"), py::arg("output_rows"), py::arg("token_types") = py::none(),
             "Run one batch; returns the final hidden states float32 [len(output_rows), n_embd] (after the "
             "output norm where the model has one). token_types: each token's segment (encoders; default 0). "
             "A bidirectional (encoder) model takes each sequence whole, at positions 0, 1, 2, ...")
        .def("forward_mixed", &forward_mixed, py::arg("tokens"), py::arg("positions"), py::arg("seq_of_token"),
             py::arg("block_tables"), py::arg("output_rows"), py::arg("hidden_rows"),
             "One forward giving (logits [len(output_rows), n_vocab], hidden states [len(hidden_rows), n_embd]): "
             "generation and embeddings in the same batch (a model with an output head).")
        .def_property_readonly("has_output_head", &Model::has_output_head,
             "Whether the model can generate (encoder-only models cannot).")
        .def_property_readonly("bidirectional", &Model::bidirectional,
             "Whether every token attends to its whole sequence (encoders).")
        .def("sample_rows", &sample_rows_py, py::arg("samplers"), py::arg("logits"), py::arg("rows"),
             py::arg("accept") = true, py::arg("masks") = py::none(), py::arg("mask_rows") = std::vector<int64_t>{},
             "Draw the next token of each row: samplers[i] samples logits[rows[i]] (then accepts it), "
             "on the model's threads; with masks (uint32 [n_masks, ceil(n_vocab / 32)] token bitmasks), "
             "sampler i draws only tokens allowed by masks[mask_rows[i]] (-1: any). Returns (tokens, errors): errors[i] is None, or the message of "
             "the failure of row i, whose token is then -1.")
        .def_property_readonly("device_memory", [](const Model& self) {
            py::dict d;
            for (Backend* be : self.backends()) d[be->name()] = be->device_memory();
            return d;
        }, "{device: bytes its driver holds for this model now} (Vulkan: its buffers' memory requirements; "
           "elsewhere the sum of allocated)")
        .def_property_readonly("allocated", &allocated_dict,
             "Bytes the backends allocated: {device: {'weights', 'kv', 'scratch'}} (the planner's terms).")
        .def_property_readonly("layer_devices", [](const Model& self) {
            std::vector<std::string> d;
            for (int il = 0; il < self.hparams().n_layer; ++il) d.push_back(self.layer_backend(il).name());
            return d;
        }, "The device of each layer.")
        .def_property_readonly("output_device", [](const Model& self) { return std::string(self.output_backend().name()); })
        .def("reserve", [](Model& self, int64_t n_tokens) {
                 if (n_tokens < 1) throw std::invalid_argument("reserve: n_tokens must be >= 1");
                 self.reserve(n_tokens);
             }, py::arg("n_tokens"), "Allocate the scratch of batches of up to n_tokens tokens now.")
        .def("copy_block", [](Model& self, int64_t src, int64_t dst) {
                 ModelInUse guard(self, "copy_block");
                 self.kv().copy_block(src, dst);
             },
             py::arg("src"), py::arg("dst"), "Copy one KV block's contents in every layer (copy-on-write).");
    register_activation_stats(model);
    m.def("supported_architectures", &supported_archs);
}
