// bind_cuda_ops.cpp — the CUDA kernels one op at a time in `localllm._harness` (builds with
// LOCALLLM_CUDA only): the op-by-op harness of tests/test_cuda.py. Each cuda_* function uploads its numpy inputs, runs one
// C API operation (cuda/cuda_api.h) on the default stream and returns the result, so a test can
// hold it to the CPU reference on the same inputs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include "bindings/self_registered.h"
namespace py = pybind11;

#ifdef LOCALLLM_HAVE_CUDA
#include <string.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "cuda_api.h"
#include "common/blocks.h"
#include "backends/cpu/ops.h"
#include "common/threadpool.h"

namespace {

using lll::cuda::check;
using lll::cuda::DeviceBuffer;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

void require_device() {
    if (llc_device_count() == 0) throw std::runtime_error("cuda: no CUDA device (or driver) on this machine");
}

DeviceBuffer upload(const void* host, size_t bytes, const char* what) {
    DeviceBuffer d(bytes, what);
    if (bytes) check(llc_memcpy_h2d(d.as<void>(), host, bytes, nullptr));
    return d;
}

template <class A> DeviceBuffer upload(const A& a, const char* what) { return upload(a.data(), a.nbytes(), what); }

// Waits for the queued work (a kernel fault surfaces here) and copies `d` into a new array.
template <class T> py::array_t<T> download(const DeviceBuffer& d, const std::vector<py::ssize_t>& shape) {
    py::array_t<T> out(shape);
    check(llc_stream_sync(nullptr));
    if (out.nbytes()) check(llc_memcpy_d2h(out.mutable_data(), d.as<void>(), out.nbytes(), nullptr));
    check(llc_stream_sync(nullptr));
    return out;
}

size_t weight_bytes(uint32_t type, int64_t rows, int64_t k, const U8Array& data, const char* op) {
    const size_t row_bytes = llc_row_bytes(type, k);
    if (!llc_matmul_supports(type)) throw std::invalid_argument(std::string(op) + ": no CUDA kernel for type id " + std::to_string(type));
    if (row_bytes == 0 || k % 32) throw std::invalid_argument(std::string(op) + ": row length " + std::to_string(k) + " is not a whole number of blocks");
    if ((size_t)data.size() != row_bytes * rows)
        throw std::invalid_argument(std::string(op) + ": data size does not match " + std::to_string(rows) + " rows of " +
                                    std::to_string(k) + " elements");
    return row_bytes * rows;
}

py::array_t<float> dequantize_py(const U8Array& data, uint32_t type, int64_t n) {
    const lll::TypeTraits* tt = lll::type_traits(type);
    if (!tt) throw std::invalid_argument("unknown type id " + std::to_string(type));
    if (n % tt->block_elems || (size_t)data.size() != (size_t)(n / tt->block_elems) * tt->block_bytes)
        throw std::invalid_argument("data size does not match n elements of " + std::string(tt->name));
    if (!llc_matmul_supports(type)) throw std::invalid_argument("cuda: no CUDA kernel for " + std::string(tt->name));
    require_device();
    DeviceBuffer src = upload(data, "dequantize input"), y(n * sizeof(float), "dequantize output");
    check(llc_dequantize(type, src.as<void>(), y.as<float>(), n, nullptr));
    return download<float>(y, {n});
}

py::array_t<float> get_rows_py(const U8Array& data, uint32_t type, int64_t n_rows, int64_t k, const I32Array& ids) {
    weight_bytes(type, n_rows, k, data, "get_rows");
    for (py::ssize_t i = 0; i < ids.size(); ++i)
        if (ids.data()[i] < 0 || ids.data()[i] >= n_rows)
            throw std::out_of_range("token id " + std::to_string(ids.data()[i]) + " out of range [0, " + std::to_string(n_rows) + ")");
    require_device();
    DeviceBuffer w = upload(data, "embedding"), d_ids = upload(ids, "token ids"), out(ids.size() * k * sizeof(float), "rows");
    check(llc_get_rows(type, w.as<void>(), n_rows, k, d_ids.as<int32_t>(), ids.size(), out.as<float>(), nullptr));
    return download<float>(out, {ids.size(), k});
}

py::array_t<float> matmul_py(const U8Array& w, uint32_t type, int64_t N, int64_t K, const F32Array& x, const std::string& path) {
    weight_bytes(type, N, K, w, "matmul");
    if (x.ndim() != 2 || x.shape(1) != K) throw std::invalid_argument("matmul: x must be [M, K]");
    const llc_matmul_path p = path == "auto" ? LLC_MATMUL_AUTO : path == "decode" ? LLC_MATMUL_DECODE
                              : path == "prompt" ? LLC_MATMUL_PROMPT : throw std::invalid_argument("matmul: path must be auto, decode or prompt");
    require_device();
    const int64_t M = x.shape(0);
    const size_t scratch_bytes = llc_matmul_scratch_bytes(type, K, M, p);
    DeviceBuffer dw = upload(w, "weight"), dx = upload(x, "activations"), y(M * N * sizeof(float), "matmul output");
    DeviceBuffer scratch(scratch_bytes, "matmul scratch");
    check(llc_matmul(type, dw.as<void>(), N, K, dx.as<float>(), M, y.as<float>(), scratch.as<void>(), scratch_bytes, p, nullptr));
    return download<float>(y, {M, N});
}

py::array_t<float> rms_norm_py(const F32Array& x, const F32Array& w, float eps) {
    if (x.ndim() != 2 || w.ndim() != 1 || w.shape(0) != x.shape(1)) throw std::invalid_argument("rms_norm: x [rows, n], w [n]");
    require_device();
    DeviceBuffer dx = upload(x, "rms_norm input"), dw = upload(w, "rms_norm weight");
    check(llc_rms_norm(dx.as<float>(), dw.as<float>(), dx.as<float>(), x.shape(0), x.shape(1), eps, nullptr));
    return download<float>(dx, {x.shape(0), x.shape(1)});
}

void check_rope_args(const F32Array& x, const I32Array& positions, int rope_dims, const std::string& style,
                     const std::optional<F32Array>& freq_factors) {
    if (x.ndim() != 3 || positions.ndim() != 1 || positions.shape(0) != x.shape(0))
        throw std::invalid_argument("rope: x must be [T, n_heads, head_dim] and positions [T]");
    if (rope_dims <= 0 || rope_dims % 2 || rope_dims > x.shape(2)) throw std::invalid_argument("rope: bad rope_dims");
    if (style != "normal" && style != "neox") throw std::invalid_argument("rope: style must be 'normal' or 'neox'");
    if (freq_factors && (freq_factors->ndim() != 1 || freq_factors->shape(0) != rope_dims / 2))
        throw std::invalid_argument("rope: freq_factors must be [rope_dims / 2]");
}

lll::RopeScaling rope_scaling_of(float freq_scale, float ext_factor, float attn_factor, int n_ctx_orig) {
    lll::RopeScaling sc;
    sc.freq_scale = freq_scale, sc.ext_factor = ext_factor, sc.attn_factor = attn_factor, sc.n_ctx_orig = n_ctx_orig;
    return sc;
}

// RoPE on the GPU, its cos/sin table built there too.
py::array_t<float> rope_py(const F32Array& x, const I32Array& positions, int rope_dims, float base, const std::string& style,
                           float freq_scale, float ext_factor, float attn_factor, int n_ctx_orig,
                           const std::optional<F32Array>& freq_factors) {
    check_rope_args(x, positions, rope_dims, style, freq_factors);
    require_device();
    const int64_t T = x.shape(0);
    DeviceBuffer dx = upload(x, "rope input"), dpos = upload(positions, "positions");
    DeviceBuffer cs(T * rope_dims * sizeof(float), "rope table");
    std::optional<DeviceBuffer> dff;
    if (freq_factors) dff.emplace(upload(*freq_factors, "rope frequency factors"));
    const lll::RopeScaling sc = rope_scaling_of(freq_scale, ext_factor, attn_factor, n_ctx_orig);
    const llc_rope_scaling scaling{sc.freq_scale, sc.ext_factor, sc.attn_factor, sc.n_ctx_orig, sc.beta_fast,
                                   sc.beta_slow, dff ? dff->as<float>() : nullptr};
    check(llc_rope_table(dpos.as<int32_t>(), T, rope_dims, base, &scaling, cs.as<float>(), nullptr));
    check(llc_rope(dx.as<float>(), T, (int)x.shape(1), (int)x.shape(2), rope_dims, cs.as<float>(), style == "neox", nullptr));
    return download<float>(dx, {T, x.shape(1), x.shape(2)});
}

// The CPU's RoPE (csrc/backends/cpu/ops.cpp, rope_table + rope) on the same inputs: the reference of rope_py.
py::array_t<float> rope_cpu_py(const F32Array& x, const I32Array& positions, int rope_dims, float base,
                               const std::string& style, float freq_scale, float ext_factor, float attn_factor,
                               int n_ctx_orig, const std::optional<F32Array>& freq_factors) {
    check_rope_args(x, positions, rope_dims, style, freq_factors);
    const int64_t T = x.shape(0);
    py::array_t<float> y({T, x.shape(1), x.shape(2)});
    memcpy(y.mutable_data(), x.data(), x.nbytes());
    std::vector<float> cs(T * rope_dims);
    const lll::RopeFreqs f{base, rope_scaling_of(freq_scale, ext_factor, attn_factor, n_ctx_orig),
                           freq_factors ? freq_factors->data() : nullptr};
    lll::rope_table(positions.data(), T, rope_dims, f, cs.data());
    lll::ThreadPool pool(1);
    lll::rope(pool, y.mutable_data(), T, (int)x.shape(1), (int)x.shape(2), rope_dims, cs.data(),
              style == "neox" ? lll::RopeStyle::NeoX : lll::RopeStyle::Normal);
    return y;
}

// Element-wise ops: "swiglu", "geglu" (gate, up), "add" (y, x: y + x), "add_bias_rows" (rows [r, n], bias [n]),
// "scale" (y, factor).
py::array_t<float> eltwise_py(const std::string& op, const F32Array& a, const F32Array& b, float factor) {
    const bool bias = op == "add_bias_rows";
    if (bias ? (a.ndim() != 2 || b.ndim() != 1 || b.shape(0) != a.shape(1)) : (op != "scale" && a.size() != b.size()))
        throw std::invalid_argument(op + ": operand shapes do not match");
    require_device();
    const int64_t n = a.size();
    DeviceBuffer da = upload(a, "first operand"), db = upload(b, "second operand"), out(n * sizeof(float), "output");
    if (op == "swiglu") check(llc_swiglu(da.as<float>(), db.as<float>(), out.as<float>(), n, nullptr));
    else if (op == "geglu") check(llc_geglu(da.as<float>(), db.as<float>(), out.as<float>(), n, nullptr));
    else {
        out = std::move(da);
        if (op == "add") check(llc_add(out.as<float>(), db.as<float>(), n, nullptr));
        else if (bias) check(llc_add_bias_rows(out.as<float>(), db.as<float>(), a.shape(0), a.shape(1), nullptr));
        else if (op == "scale") check(llc_scale(out.as<float>(), factor, n, nullptr));
        else throw std::invalid_argument("unknown element-wise op '" + op + "'");
    }
    std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
    return download<float>(out, shape);
}

// A one-layer paged cache on the GPU, filled through the batch of tokens (k, v: [T, n_head_kv, hd]).
struct PagedCache {
    int64_t T, width;
    DeviceBuffer k, v, dk, dv, pos, seq, tables;
    llc_kv_layer layer;
    llc_batch batch{};

    PagedCache(const F32Array& kx, const F32Array& vx, const I32Array& positions, const I32Array& seq_of_token,
               const I32Array& block_tables, int64_t n_blocks, int block_size) {
        if (kx.ndim() != 3 || vx.ndim() != 3 || kx.shape(0) != vx.shape(0) || kx.shape(1) != vx.shape(1) || kx.shape(2) != vx.shape(2))
            throw std::invalid_argument("kv: k and v must both be [T, n_head_kv, head_dim]");
        T = kx.shape(0), width = kx.shape(1) * kx.shape(2);
        if (positions.size() != T || seq_of_token.size() != T || block_tables.ndim() != 2)
            throw std::invalid_argument("kv: positions and seq_of_token must be [T], block_tables [n_seqs, max_blocks]");
        if (n_blocks <= 0 || block_size <= 0) throw std::invalid_argument("kv: n_blocks and block_size must be positive");
        for (int64_t t = 0; t < T; ++t) {   // the kernels trust the batch: check what they will index
            const int32_t s = seq_of_token.data()[t], p = positions.data()[t];
            if (s < 0 || s >= block_tables.shape(0) || p < 0 || p / block_size >= block_tables.shape(1))
                throw std::invalid_argument("kv: token " + std::to_string(t) + " has a bad sequence or position");
            const int32_t blk = block_tables.at(s, p / block_size);
            if (blk < 0 || blk >= n_blocks) throw std::invalid_argument("kv: block id out of range");
        }
        require_device();
        const size_t cache_bytes = (size_t)n_blocks * block_size * width * sizeof(uint16_t);
        k = DeviceBuffer(cache_bytes, "K cache"), v = DeviceBuffer(cache_bytes, "V cache");
        check(llc_memset(k.as<void>(), 0, cache_bytes, nullptr));
        check(llc_memset(v.as<void>(), 0, cache_bytes, nullptr));
        dk = upload(kx, "k rows"), dv = upload(vx, "v rows");
        pos = upload(positions, "positions"), seq = upload(seq_of_token, "seq_of_token"), tables = upload(block_tables, "block tables");
        layer = {k.as<uint16_t>(), v.as<uint16_t>(), n_blocks, block_size, width};
        batch.block_tables = tables.as<int32_t>(), batch.n_seqs = block_tables.shape(0), batch.max_blocks = block_tables.shape(1);
    }

    // Writes the K/V rows of tokens [t0, t1).
    void write(int64_t t0, int64_t t1) {
        llc_batch b = batch;
        b.positions = pos.as<int32_t>() + t0, b.seq_of_token = seq.as<int32_t>() + t0, b.n_tokens = t1 - t0;
        check(llc_kv_write(layer, dk.as<float>() + t0 * width, dv.as<float>() + t0 * width, &b, nullptr));
    }

    void copy_blocks(const std::vector<std::pair<int64_t, int64_t>>& copies) {
        for (const auto& c : copies) check(llc_kv_copy_block(layer, c.first, c.second, nullptr));
    }
};

// Writes K/V of tokens [0, first_rows), copies the blocks (src, dst) in order, writes the rest:
// a shared prefix, then copy-on-write, then the sequences' own tokens.
void fill_cache(PagedCache& c, int64_t first_rows, const std::vector<std::pair<int64_t, int64_t>>& copies) {
    const int64_t split = first_rows < 0 || first_rows > c.T ? c.T : first_rows;
    c.write(0, split);
    c.copy_blocks(copies);
    c.write(split, c.T);
}

py::tuple kv_test_py(const F32Array& k, const F32Array& v, const I32Array& positions, const I32Array& seq_of_token,
                     const I32Array& block_tables, int64_t n_blocks, int block_size, int64_t first_rows,
                     const std::vector<std::pair<int64_t, int64_t>>& copies) {
    PagedCache c(k, v, positions, seq_of_token, block_tables, n_blocks, block_size);
    fill_cache(c, first_rows, copies);
    return py::make_tuple(download<uint16_t>(c.k, {n_blocks, block_size, c.width}),
                          download<uint16_t>(c.v, {n_blocks, block_size, c.width}));
}

// attention_test's GPU twin (tests/test_attention.py): fills a paged cache with every token's K/V
// (first_rows, copies: see fill_cache), then attends for the tokens query_rows with their q rows.
py::array_t<float> attention_py(const F32Array& q, const F32Array& k, const F32Array& v, const I32Array& positions,
                                const I32Array& seq_of_token, const I32Array& block_tables, int64_t n_blocks, int block_size,
                                const I32Array& query_rows, float scale, int window, int64_t first_rows,
                                const std::vector<std::pair<int64_t, int64_t>>& copies) {
    if (q.ndim() != 3 || q.shape(0) != k.shape(0) || q.shape(2) != k.shape(2))
        throw std::invalid_argument("attention: q must be [T, n_head, head_dim] like k");
    PagedCache c(k, v, positions, seq_of_token, block_tables, n_blocks, block_size);
    fill_cache(c, first_rows, copies);
    const int64_t Tq = query_rows.size(), n_head = q.shape(1), hd = q.shape(2);
    std::vector<int32_t> qpos(Tq), qseq(Tq), tiles(2 * Tq + 2);
    std::vector<float> qsub(Tq * n_head * hd);
    for (int64_t i = 0; i < Tq; ++i) {
        const int32_t t = query_rows.data()[i];
        if (t < 0 || t >= c.T) throw std::invalid_argument("attention: query row out of range");
        if (i > 0 && qseq[i - 1] == seq_of_token.data()[t] && qpos[i - 1] >= positions.data()[t])
            throw std::invalid_argument("attention: positions of a sequence must increase within the batch");
        qpos[i] = positions.data()[t], qseq[i] = seq_of_token.data()[t];
        memcpy(&qsub[i * n_head * hd], q.data() + t * n_head * hd, n_head * hd * sizeof(float));
    }
    llc_batch b = c.batch;
    b.n_tiles = llc_attention_tiles(qseq.data(), Tq, tiles.data(), &b.max_tile_tokens);
    DeviceBuffer dpos = upload(qpos.data(), Tq * 4, "query positions"), dseq = upload(qseq.data(), Tq * 4, "query seqs");
    DeviceBuffer dtiles = upload(tiles.data(), b.n_tiles * 8, "tiles"), dq = upload(qsub.data(), qsub.size() * 4, "q");
    DeviceBuffer out(qsub.size() * sizeof(float), "attention output");
    b.positions = dpos.as<int32_t>(), b.seq_of_token = dseq.as<int32_t>(), b.tiles = dtiles.as<int32_t>(), b.n_tokens = Tq;
    check(llc_attention(c.layer, dq.as<float>(), out.as<float>(), &b, (int)n_head, (int)k.shape(1), (int)hd, scale, window, 0.0f, nullptr));
    return download<float>(out, {Tq, n_head, hd});
}

// Mean device time (ms, CUDA events) of one llc_matmul over `iters` launches after 3 warm-ups.
double matmul_ms_py(const U8Array& w, uint32_t type, int64_t N, int64_t K, const F32Array& x, const std::string& path, int iters) {
    weight_bytes(type, N, K, w, "matmul_ms");
    if (x.ndim() != 2 || x.shape(1) != K || iters < 1) throw std::invalid_argument("matmul_ms: x must be [M, K], iters >= 1");
    const llc_matmul_path p = path == "decode" ? LLC_MATMUL_DECODE : path == "prompt" ? LLC_MATMUL_PROMPT : LLC_MATMUL_AUTO;
    require_device();
    const int64_t M = x.shape(0);
    const size_t scratch_bytes = llc_matmul_scratch_bytes(type, K, M, p);
    DeviceBuffer dw = upload(w, "weight"), dx = upload(x, "activations"), y(M * N * sizeof(float), "matmul output");
    DeviceBuffer scratch(scratch_bytes, "matmul scratch");
    auto once = [&] {
        check(llc_matmul(type, dw.as<void>(), N, K, dx.as<float>(), M, y.as<float>(), scratch.as<void>(), scratch_bytes, p, nullptr));
    };
    for (int i = 0; i < 3; ++i) once();
    llc_event start, end;
    check(llc_event_create(&start));
    check(llc_event_create(&end));
    check(llc_event_record(start, nullptr));
    for (int i = 0; i < iters; ++i) once();
    check(llc_event_record(end, nullptr));
    check(llc_event_sync(end));
    float ms = 0.0f;
    check(llc_event_elapsed_ms(&ms, start, end));
    llc_event_destroy(start);
    llc_event_destroy(end);
    return ms / iters;
}

// The decode path's arithmetic and the dequantization of cuda/quant_formats.cuh, run on the host.
py::array_t<float> host_decode_matmul_py(const U8Array& w, uint32_t type, int64_t N, int64_t K, const F32Array& x) {
    weight_bytes(type, N, K, w, "host_decode_matmul");
    if (x.ndim() != 2 || x.shape(1) != K) throw std::invalid_argument("host_decode_matmul: x must be [M, K]");
    py::array_t<float> y({(py::ssize_t)x.shape(0), (py::ssize_t)N});
    check(llc_host_decode_matmul(type, w.data(), N, K, x.data(), x.shape(0), y.mutable_data()));
    return y;
}

py::array_t<float> host_dequantize_py(const U8Array& data, uint32_t type, int64_t n) {
    weight_bytes(type, 1, n, data, "host_dequantize");
    py::array_t<float> y(n);
    check(llc_host_dequantize(type, data.data(), y.mutable_data(), n));
    return y;
}

// A decode-step-like sequence (RMSNorm, then the matmul's decode path) run directly on a stream,
// then captured into a CUDA graph and replayed for each x of xs (uploaded before each replay):
// returns (direct results, graph results), both [len(xs), M, N].
py::tuple graph_test_py(const F32Array& xs, const F32Array& norm_w, const U8Array& w, uint32_t type, int64_t N) {
    if (xs.ndim() != 3 || norm_w.ndim() != 1 || norm_w.shape(0) != xs.shape(2))
        throw std::invalid_argument("graph_test: xs [n, M, K], norm_w [K]");
    const int64_t n = xs.shape(0), M = xs.shape(1), K = xs.shape(2);
    weight_bytes(type, N, K, w, "graph_test");
    require_device();
    llc_stream s = nullptr;
    check(llc_stream_create(&s));
    const size_t x_bytes = M * K * sizeof(float), y_bytes = M * N * sizeof(float);
    const size_t scratch_bytes = llc_matmul_scratch_bytes(type, K, M, LLC_MATMUL_AUTO);
    DeviceBuffer dw = upload(w, "weight"), dn = upload(norm_w, "norm weight"), dx(x_bytes, "x"), dxn(x_bytes, "normed x");
    DeviceBuffer dy(y_bytes, "y"), scratch(scratch_bytes, "matmul scratch");
    check(llc_stream_sync(nullptr));   // s does not wait for the default stream's uploads
    auto step = [&] {
        check(llc_rms_norm(dx.as<float>(), dn.as<float>(), dxn.as<float>(), M, K, 1e-6f, s));
        check(llc_matmul(type, dw.as<void>(), N, K, dxn.as<float>(), M, dy.as<float>(), scratch.as<void>(), scratch_bytes,
                         LLC_MATMUL_AUTO, s));
    };
    py::array_t<float> direct({n, M, N}), replayed({n, M, N});
    for (int64_t i = 0; i < n; ++i) {
        check(llc_memcpy_h2d(dx.as<void>(), xs.data() + i * M * K, x_bytes, s));
        step();
        check(llc_memcpy_d2h(direct.mutable_data() + i * M * N, dy.as<void>(), y_bytes, s));
        check(llc_stream_sync(s));
    }
    llc_graph g = nullptr;
    check(llc_capture_begin(s));
    step();
    check(llc_capture_end(s, &g));
    for (int64_t i = 0; i < n; ++i) {
        check(llc_memset(dy.as<void>(), 0, y_bytes, s));
        check(llc_memcpy_h2d(dx.as<void>(), xs.data() + i * M * K, x_bytes, s));
        check(llc_graph_launch(g, s));
        check(llc_memcpy_d2h(replayed.mutable_data() + i * M * N, dy.as<void>(), y_bytes, s));
        check(llc_stream_sync(s));
    }
    check(llc_graph_destroy(g));
    check(llc_stream_destroy(s));
    return py::make_tuple(direct, replayed);
}

}  // namespace

void register_cuda_ops(py::module_& m) {
    // This module's own translators (tried before _core's for its functions), so a harness op's
    // CUDA error is _harness.CudaError / CudaOutOfMemory (a MemoryError) whether or not _core is loaded.
    py::register_local_exception<lll::cuda::Error>(m, "CudaError", PyExc_RuntimeError);
    py::register_local_exception<lll::cuda::OutOfMemory>(m, "CudaOutOfMemory", PyExc_MemoryError);
    m.def("cuda_alloc", [](size_t bytes, const std::string& what) { DeviceBuffer b(bytes, what.c_str()); },
          py::arg("bytes"), py::arg("what"), "Allocates and frees `bytes` on the device (CudaOutOfMemory when they do not fit).");
    m.def("cuda_dequantize", &dequantize_py, py::arg("data"), py::arg("type"), py::arg("n"),
          "Dequantize on the GPU (checks kernels vs CPU).");
    m.def("cuda_get_rows", &get_rows_py, py::arg("data"), py::arg("type"), py::arg("n_rows"), py::arg("k"), py::arg("ids"),
          "Rows ids of a [n_rows, k] weight, dequantized on the GPU (the embedding lookup).");
    m.def("cuda_matmul", &matmul_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"), py::arg("x"),
          py::arg("path") = "auto", "Y[M, N] = X[M, K] . W[N, K]^T on the GPU; path auto, decode (int8 dots) or prompt (tensor cores).");
    m.def("cuda_matmul_ms", &matmul_ms_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"), py::arg("x"),
          py::arg("path") = "auto", py::arg("iters") = 20, "Mean device time (ms) of cuda_matmul's kernels (benchmarks/cuda_matmul.py).");
    m.def("cuda_host_decode_matmul", &host_decode_matmul_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("x"), "The CUDA decode path's arithmetic (q8_1 activations, int8 group dots) run on the host.");
    m.def("cuda_host_dequantize", &host_dequantize_py, py::arg("data"), py::arg("type"), py::arg("n"),
          "The CUDA dequantization code run on the host.");
    m.def("cuda_graph_test", &graph_test_py, py::arg("xs"), py::arg("norm_w"), py::arg("w"), py::arg("wtype"), py::arg("N"),
          "RMSNorm + matmul run directly, then captured in a CUDA graph and replayed per x: (direct, replayed).");
    m.def("cuda_rms_norm", &rms_norm_py, py::arg("x"), py::arg("w"), py::arg("eps"), "RMSNorm of each row of x[rows, n].");
    m.def("cuda_rope", &rope_py, py::arg("x"), py::arg("positions"), py::arg("rope_dims"), py::arg("base"),
          py::arg("style") = "normal", py::arg("freq_scale") = 1.0f, py::arg("ext_factor") = 0.0f,
          py::arg("attn_factor") = 1.0f, py::arg("n_ctx_orig") = 0, py::arg("freq_factors") = py::none(),
          "RoPE of x[T, n_heads, head_dim] on the GPU (table built there), with linear/YaRN scaling and frequency factors.");
    m.def("cuda_rope_cpu_reference", &rope_cpu_py, py::arg("x"), py::arg("positions"), py::arg("rope_dims"), py::arg("base"),
          py::arg("style") = "normal", py::arg("freq_scale") = 1.0f, py::arg("ext_factor") = 0.0f,
          py::arg("attn_factor") = 1.0f, py::arg("n_ctx_orig") = 0, py::arg("freq_factors") = py::none(),
          "The CPU's RoPE (csrc/backends/cpu/ops.cpp) on the same inputs.");
    m.def("cuda_eltwise", &eltwise_py, py::arg("op"), py::arg("a"), py::arg("b"), py::arg("factor") = 1.0f,
          "swiglu/geglu(gate=a, up=b), add (a + b), add_bias_rows (a[r, n] + b[n]), scale (a * factor) on the GPU.");
    m.def("cuda_kv_test", &kv_test_py, py::arg("k"), py::arg("v"), py::arg("positions"), py::arg("seq_of_token"),
          py::arg("block_tables"), py::arg("n_blocks"), py::arg("block_size"), py::arg("first_rows") = -1,
          py::arg("copies") = std::vector<std::pair<int64_t, int64_t>>{},
          "KV writes through the block tables (and block copies after the first rows): the K and V caches (F16 bits).");
    m.def("cuda_attention_test", &attention_py, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("positions"),
          py::arg("seq_of_token"), py::arg("block_tables"), py::arg("n_blocks"), py::arg("block_size"), py::arg("query_rows"),
          py::arg("scale"), py::arg("window") = 0, py::arg("first_rows") = -1,
          py::arg("copies") = std::vector<std::pair<int64_t, int64_t>>{},
          "attention_test on the GPU: paged cache filled through kv writes (and block copies), then attention for query_rows.");
}

const lll::SelfRegisteredBindings kCudaOps(lll::BindingsModule::Harness, &register_cuda_ops);
#endif  // LOCALLLM_HAVE_CUDA
