// bind_vulkan_backend.cpp — the Vulkan backend's paged attention in _harness: the same
// arguments and result as _harness.attention_test (the CPU's), run through the VulkanBackend
// itself (begin_batch, kv_write, attention on its device memory), so a test holds the backend's
// cache layout, block tables and kernel to the CPU on the same data; and the bytes a quantized
// cache stores, beside the values the CPU's cache stores for the same keys and values.
#ifdef LOCALLLM_HAVE_VULKAN
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/registry.h"
#include "bindings/self_registered.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace py = pybind11;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

struct AttentionCase {
    F32Array q, k, v;
    I32Array positions, seq_of_token, block_tables, query_rows;
};

void check_case(const AttentionCase& c, int64_t n_blocks, int block_size) {
    if (c.q.ndim() != 3 || c.k.ndim() != 3 || c.v.ndim() != 3 || c.block_tables.ndim() != 2)
        throw std::invalid_argument("vulkan_attention_test: q, k, v must be [T, heads, head_dim], block_tables 2-D");
    const int64_t T = c.q.shape(0);
    if (c.k.shape(0) != T || c.v.shape(0) != T || c.positions.size() != T || c.seq_of_token.size() != T ||
        c.k.shape(1) != c.v.shape(1) || c.k.shape(2) != c.q.shape(2) || c.v.shape(2) != c.q.shape(2))
        throw std::invalid_argument("vulkan_attention_test: k, v [T, n_head_kv, head_dim], positions and "
                                    "seq_of_token [T] must match q");
    for (int64_t t = 0; t < T; ++t) {   // kv_write trusts its batch: check what it will index
        const int32_t s = c.seq_of_token.at(t), p = c.positions.at(t);
        if (s < 0 || s >= c.block_tables.shape(0) || p < 0 || p / block_size >= c.block_tables.shape(1))
            throw std::invalid_argument("vulkan_attention_test: token " + std::to_string(t) + " has a bad sequence or position");
        const int32_t blk = c.block_tables.at(s, p / block_size);
        if (blk < 0 || blk >= n_blocks) throw std::invalid_argument("vulkan_attention_test: block id out of range");
    }
    for (int64_t i = 0; i < c.query_rows.size(); ++i)
        if (c.query_rows.data()[i] < 0 || c.query_rows.data()[i] >= T)
            throw std::invalid_argument("vulkan_attention_test: query row out of range");
}

lll::KVTypes cache_types(const std::string& k, const std::string& v) {
    return lll::KVTypes{lll::parse_cache_type(k), lll::parse_cache_type(v)};
}

lll::Batch batch_of(const AttentionCase& c) {
    lll::Batch all;
    all.positions = c.positions.data(), all.seq_of_token = c.seq_of_token.data(), all.n_tokens = c.q.shape(0);
    all.block_tables = c.block_tables.data(), all.n_seqs = c.block_tables.shape(0);
    all.max_blocks = c.block_tables.shape(1);
    return all;
}

// A Vulkan backend sized for the case's attention, a one-layer cache of `types` on it, and every
// token's K and V written into it.
struct VulkanCase {
    std::unique_ptr<lll::Backend> be;
    std::unique_ptr<lll::KVCache> kv;
    lll::HParams hp;   // what the backend's scratch is sized by: the attention's widths only

    VulkanCase(const AttentionCase& c, int64_t n_blocks, int block_size, lll::KVTypes types, int64_t T_max) {
        check_case(c, n_blocks, block_size);
        const int64_t n_head = c.q.shape(1), n_head_kv = c.k.shape(1), hd = c.q.shape(2);
        hp.n_head = (int)n_head, hp.n_head_kv = (int)n_head_kv, hp.head_dim = (int)hd;
        hp.n_embd = (int)(n_head * hd), hp.n_ff = 1, hp.n_vocab = 1, hp.rope_dims = 2;
        // The harness names Vulkan, as --device vulkan does, so a CPU implementation (lavapipe) may
        // run it; this module's registry is its own (it links its own copy of the core).
        const lll::Placement p = lll::resolve_offload("Vulkan");
        const lll::BackendConfig cfg{&hp, nullptr, lll::Isa{}, lll::Numerics{}, p};
        be = lll::make_backend(p, cfg);
        kv = std::make_unique<lll::KVCache>(std::vector<lll::Backend*>{be.get()}, n_blocks, block_size, (int)n_head_kv,
                                            (int)hd, types);
        be->reserve(T_max);
        const lll::ActScratch& s = be->scratch();
        const lll::Batch all = batch_of(c);
        be->begin_batch(all);
        be->from_host(s.k, c.k.data(), (size_t)c.k.size() * sizeof(float));
        be->from_host(s.v, c.v.data(), (size_t)c.v.size() * sizeof(float));
        be->kv_write(*kv, 0, s.k, s.v, all);
    }
};

py::array_t<float> attention_py(const AttentionCase& c, int64_t n_blocks, int block_size, float scale, int window,
                                float softcap, lll::KVTypes types) {
    const int64_t T = c.q.shape(0), n_head = c.q.shape(1), n_head_kv = c.k.shape(1), hd = c.q.shape(2);
    const int64_t Tq = c.query_rows.size();
    VulkanCase vc(c, n_blocks, block_size, types, std::max<int64_t>(T, Tq));
    lll::Backend& be = *vc.be;
    const lll::ActScratch& s = be.scratch();
    std::vector<int32_t> qpos(Tq), qseq(Tq);
    std::vector<float> qsub(Tq * n_head * hd);
    for (int64_t i = 0; i < Tq; ++i) {
        const int32_t t = c.query_rows.data()[i];
        qpos[i] = c.positions.at(t), qseq[i] = c.seq_of_token.at(t);
        std::copy(c.q.data() + t * n_head * hd, c.q.data() + (t + 1) * n_head * hd, qsub.begin() + i * n_head * hd);
    }
    lll::Batch qb = batch_of(c);
    qb.positions = qpos.data(), qb.seq_of_token = qseq.data(), qb.n_tokens = Tq;
    be.begin_batch(qb);
    be.from_host(s.q, qsub.data(), qsub.size() * sizeof(float));
    be.attention(*vc.kv, 0, s.q, s.attn, qb, lll::AttnParams{(int)n_head, (int)n_head_kv, (int)hd, scale, window, softcap});
    py::array_t<float> out({Tq, n_head, hd});
    be.to_host(out.mutable_data(), s.attn, (size_t)out.size() * sizeof(float));
    return out;
}

// The case's K and V written by the Vulkan backend into a cache of `types`: its layer's bytes
// ("k", "v": [slots, row bytes], slot-major), and the values the CPU's cache of the same types
// holds for the same writes ("k_cpu", "v_cpu": [slots, kv_width] f32, KVCache::read).
py::dict kv_bytes_py(const AttentionCase& c, int64_t n_blocks, int block_size, lll::KVTypes types) {
    const int64_t T = c.q.shape(0), n_head_kv = c.k.shape(1), hd = c.q.shape(2), width = n_head_kv * hd;
    VulkanCase vc(c, n_blocks, block_size, types, T);
    const lll::BackendConfig host_cfg{&vc.hp, nullptr, lll::Isa{}, lll::Numerics{}, lll::kHostPlacement};
    const std::unique_ptr<lll::Backend> host = lll::make_backend(lll::kHostPlacement, host_cfg);   // KV memory only
    lll::KVCache cpu({host.get()}, n_blocks, block_size, (int)n_head_kv, (int)hd, types);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t pos = c.positions.at(t);
        const int32_t blk = c.block_tables.at(c.seq_of_token.at(t), pos / block_size);
        cpu.write(0, blk, pos % block_size, c.k.data() + t * width, c.v.data() + t * width);
    }
    const int64_t slots = n_blocks * block_size;
    py::dict out;
    for (bool values : {false, true}) {
        const size_t row = vc.kv->slot_row_bytes(values);
        py::array_t<uint8_t> stored({slots, (int64_t)row});
        vc.be->to_host(stored.mutable_data(), values ? (const void*)vc.kv->v_data(0) : (const void*)vc.kv->k_data(0),
                       (size_t)slots * row);
        py::array_t<float> ref({slots, width});
        for (int64_t i = 0; i < slots; ++i)
            cpu.read(values, 0, i / block_size, (int)(i % block_size), 0, (int)width, ref.mutable_data() + i * width);
        out[values ? "v" : "k"] = stored;
        out[values ? "v_cpu" : "k_cpu"] = ref;
    }
    return out;
}

void register_vulkan_backend(py::module_& m) {
    m.def("vulkan_attention_test",
          [](const F32Array& q, const F32Array& k, const F32Array& v, const I32Array& positions,
             const I32Array& seq_of_token, const I32Array& block_tables, int64_t n_blocks, int block_size,
             const I32Array& query_rows, float scale, int window, float softcap, const std::string& cache_type_k,
             const std::string& cache_type_v) {
              return attention_py(AttentionCase{q, k, v, positions, seq_of_token, block_tables, query_rows}, n_blocks,
                                  block_size, scale, window, softcap, cache_types(cache_type_k, cache_type_v));
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("positions"), py::arg("seq_of_token"),
          py::arg("block_tables"), py::arg("n_blocks"), py::arg("block_size"), py::arg("query_rows"),
          py::arg("scale"), py::arg("window") = 0, py::arg("softcap") = 0.0f, py::arg("cache_type_k") = "f16",
          py::arg("cache_type_v") = "f16",
          "attention_test's case on the Vulkan backend (its device: LOCALLLM_VULKAN_ALLOW_CPU=1 admits lavapipe).");
    m.def("vulkan_kv_bytes",
          [](const F32Array& k, const F32Array& v, const I32Array& positions, const I32Array& seq_of_token,
             const I32Array& block_tables, int64_t n_blocks, int block_size, const std::string& cache_type_k,
             const std::string& cache_type_v) {
              const I32Array no_rows(std::vector<py::ssize_t>{0});
              return kv_bytes_py(AttentionCase{k, k, v, positions, seq_of_token, block_tables, no_rows}, n_blocks,
                                 block_size, cache_types(cache_type_k, cache_type_v));
          },
          py::arg("k"), py::arg("v"), py::arg("positions"), py::arg("seq_of_token"), py::arg("block_tables"),
          py::arg("n_blocks"), py::arg("block_size"), py::arg("cache_type_k") = "f16", py::arg("cache_type_v") = "f16",
          "k, v [T, n_head_kv, head_dim] written by the Vulkan backend into a one-layer cache of these types: "
          "{'k', 'v': its bytes [slots, row bytes], 'k_cpu', 'v_cpu': the CPU cache's values [slots, kv_width]}.");
}

const lll::SelfRegisteredBindings kVulkanBackend(lll::BindingsModule::Harness, &register_vulkan_backend);

}  // namespace
#endif  // LOCALLLM_HAVE_VULKAN
