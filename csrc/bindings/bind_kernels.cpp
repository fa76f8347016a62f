// bind_kernels.cpp — Python bindings for the kernels: ISA levels, activation quantization,
// single dot products, matmul, and two measurement helpers for benchmarks/matvec.py
// (streaming read bandwidth, thread-pool dispatch latency), and a test entry for attention over the
// paged KV cache (tests/test_attention.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdlib.h>
#include <string.h>

#include <time.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "model/kv_cache.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ggml_numerics/ggml_order.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/quants/bseq/bseq.h"
#include "backends/cpu/quants/quants.h"
#include "backends/cpu/quants/dot/dot_impl.h"
#include "common/threadpool.h"

namespace py = pybind11;
using lll::GGMLType;
using lll::Isa;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

// A pool per thread count, shared by every call from Python; `busy` serializes run() on it
// because the GIL is released while kernels run.
struct SharedPool {
    explicit SharedPool(int n) : pool(n) {}
    lll::ThreadPool pool;
    std::mutex busy;
};

SharedPool& shared_pool(int n_threads) {
    if (n_threads < 1 || n_threads > 256)
        throw std::invalid_argument("n_threads must be in 1..256, got " + std::to_string(n_threads));
    static std::mutex mu;
    static std::map<int, std::unique_ptr<SharedPool>> pools;
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = pools[n_threads];
    if (!slot) slot.reset(new SharedPool(n_threads));
    return *slot;
}

Isa isa_from_int(int isa, bool allow_best) {
    if (allow_best && isa == -1) return lll::best_isa();
    if (isa < 0 || isa > 2) throw std::invalid_argument("isa must be 0 (scalar), 1 (avx2) or 2 (avx512), got " + std::to_string(isa));
    const Isa level = static_cast<Isa>(isa);
    if (!lll::isa_available(level))
        throw std::invalid_argument(std::string("ISA level ") + lll::isa_name(level) + " is not available on this CPU/build");
    return level;
}

const lll::TypeTraits& traits_from_int(int type) {
    const lll::TypeTraits* tt = type >= 0 ? lll::type_traits((uint32_t)type) : nullptr;
    if (!tt) throw std::invalid_argument("unknown ggml type id " + std::to_string(type));
    return *tt;
}

// Bytes of one row of n elements of this type; n must be a positive multiple of the block size.
int64_t row_bytes(const lll::TypeTraits& tt, int64_t n) {
    if (n <= 0 || n % tt.block_elems != 0)
        throw std::invalid_argument(std::string("n = ") + std::to_string(n) + " is not a positive multiple of the " +
                                    tt.name + " block size " + std::to_string(tt.block_elems));
    return n / tt.block_elems * tt.block_bytes;
}

U8Array raw_bytes(const py::array& a, const char* what) {
    if (a.dtype().kind() != 'u' || a.itemsize() != 1)
        throw std::invalid_argument(std::string(what) + " must be a uint8 array of raw block bytes");
    return U8Array::ensure(a);
}

py::array_t<uint8_t> quantize_act_py(const F32Array& x, int vec_dot_type, int isa) {
    const lll::TypeTraits& tt = traits_from_int(vec_dot_type);
    const Isa level = isa_from_int(isa, true);
    if (x.ndim() != 1) throw std::invalid_argument("quantize_act: x must be 1-D");
    const int64_t n = x.shape(0);
    py::array_t<uint8_t> out(row_bytes(tt, n));
    lll::quantize_act_row(static_cast<GGMLType>(vec_dot_type), x.data(), out.mutable_data(), n, level);
    return out;
}

float vec_dot_py(int wtype, const py::array& w, const py::array& x, int64_t n, int isa) {
    const lll::TypeTraits& wt = traits_from_int(wtype);
    const Isa level = isa_from_int(isa, true);
    lll::VecDotFn fn = lll::vec_dot_fn(static_cast<GGMLType>(wtype), level);
    if (!fn) throw std::invalid_argument(std::string("no dot product for weight type ") + wt.name);
    const U8Array wb = raw_bytes(w, "w_row_bytes"), xb = raw_bytes(x, "x_act_bytes");
    const int64_t wrb = row_bytes(wt, n), xrb = row_bytes(*lll::type_traits(wt.vec_dot_type), n);
    if (wb.size() != wrb)
        throw std::invalid_argument("w_row_bytes has " + std::to_string(wb.size()) + " bytes, expected " + std::to_string(wrb));
    if (xb.size() != xrb)
        throw std::invalid_argument("x_act_bytes has " + std::to_string(xb.size()) + " bytes, expected " + std::to_string(xrb));
    return fn(n, wb.data(), xb.data());
}

// N rows of raw weight blocks of K elements.
U8Array checked_weight_rows(const char* what, const lll::TypeTraits& wt, const py::array& w, int64_t N, int64_t K) {
    if (N <= 0) throw std::invalid_argument(std::string(what) + ": N must be > 0");
    U8Array wb = raw_bytes(w, "w");
    const int64_t wrb = row_bytes(wt, K);
    if (wb.size() != N * wrb)
        throw std::invalid_argument(std::string(what) + ": w has " + std::to_string(wb.size()) +
                                    " bytes, expected N * row_bytes = " + std::to_string(N) + " * " + std::to_string(wrb));
    return wb;
}

void check_acts(const char* what, const F32Array& x, int64_t K) {
    if (x.ndim() != 2 || x.shape(1) != K)
        throw std::invalid_argument(std::string(what) + ": x must have shape [M, K] with K = " + std::to_string(K));
}

// The checks shared by the matmul entry points: N rows of raw weight blocks, x of shape [M, K].
U8Array checked_weights(const char* what, const lll::TypeTraits& wt, const py::array& w, int64_t N, int64_t K,
                        const F32Array& x) {
    check_acts(what, x, K);
    return checked_weight_rows(what, wt, w, N, K);
}

// The traits of a weight type that the block-sequential kernels repack at this level.
const lll::TypeTraits& repackable_traits(const char* what, int wtype, Isa level) {
    const lll::TypeTraits& wt = traits_from_int(wtype);
    if (!lll::can_repack(static_cast<GGMLType>(wtype), level))
        throw std::invalid_argument(std::string(what) + ": " + wt.name + " is not repacked at ISA level " +
                                    lll::isa_name(level) + " on this CPU");
    return wt;
}

// y[M, N] = a new array filled by fn(pool, y) on the shared pool, with the GIL released.
template <class Fn>
py::array_t<float> on_shared_pool(int n_threads, int64_t M, int64_t N, Fn&& fn) {
    SharedPool& sp = shared_pool(n_threads);
    py::array_t<float> y({M, N});
    float* yp = y.mutable_data();
    {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(sp.busy);
        fn(sp.pool, yp);
    }
    return y;
}

py::array_t<float> matmul_py(const py::array& w, int wtype, int64_t N, int64_t K, const F32Array& x,
                             int n_threads, int isa) {
    const lll::TypeTraits& wt = traits_from_int(wtype);
    const Isa level = isa_from_int(isa, true);
    if (!lll::vec_dot_fn(static_cast<GGMLType>(wtype), level))
        throw std::invalid_argument(std::string("matmul: no dot product for weight type ") + wt.name);
    const U8Array wb = checked_weights("matmul", wt, w, N, K, x);
    const int64_t M = x.shape(0);
    return on_shared_pool(n_threads, M, N, [&](lll::ThreadPool& pool, float* yp) {
        lll::matmul(pool, static_cast<GGMLType>(wtype), wb.data(), N, K, x.data(), M, yp, level);
    });
}

// matmul in llama.cpp's float order (Numerics::LlamaCpp; quants/ggml_order.h), or the scalar
// reference of the same order with `reference`.
py::array_t<float> matmul_llamacpp_py(const py::array& w, int wtype, int64_t N, int64_t K, const F32Array& x,
                                      int n_threads, bool reference) {
    const GGMLType t = static_cast<GGMLType>(wtype);
    const lll::TypeTraits& wt = traits_from_int(wtype);
    if (!lll::ggml_order::supported(t, N))
        throw std::invalid_argument(std::string("matmul_llamacpp: no llama.cpp-order kernel for ") + wt.name +
                                    " weights of " + std::to_string(N) + " rows");
    const U8Array wb = checked_weights("matmul_llamacpp", wt, w, N, K, x);
    const int64_t M = x.shape(0);
    return on_shared_pool(n_threads, M, N, [&](lll::ThreadPool& pool, float* yp) {
        lll::ggml_order::matmul(pool, t, wb.data(), N, K, x.data(), M, yp, N, reference);
    });
}

// matmul through a weight repacked for the block-sequential kernels (what models do at load).
// `prepacked`: w already holds repack_weight's bytes (benchmarks time the matmul alone).
py::array_t<float> matmul_repacked_py(const py::array& w, int wtype, int64_t N, int64_t K, const F32Array& x,
                                      int n_threads, bool prepacked, int isa) {
    const GGMLType t = static_cast<GGMLType>(wtype);
    const Isa level = isa_from_int(isa, true);
    const lll::TypeTraits& wt = repackable_traits("matmul_repacked", wtype, level);
    check_acts("matmul_repacked", x, K);
    U8Array wb;
    if (prepacked) {
        wb = raw_bytes(w, "w");
        row_bytes(wt, K);   // throws unless K is a whole number of blocks
        if (N <= 0 || (size_t)wb.size() != lll::repacked_bytes(t, N, K))
            throw std::invalid_argument("matmul_repacked: w is not repack_weight's output for [N, K]");
    } else {
        wb = checked_weight_rows("matmul_repacked", wt, w, N, K);
    }
    const int64_t M = x.shape(0);
    return on_shared_pool(n_threads, M, N, [&](lll::ThreadPool& pool, float* yp) {
        std::vector<uint8_t> r;
        const uint8_t* packed = wb.data();
        if (!prepacked) {
            r.resize(lll::repacked_bytes(t, N, K));
            lll::repack_weight(pool, t, wb.data(), N, K, r.data());
            packed = r.data();
        }
        std::vector<uint8_t> xq(lll::act_buffer_bytes(wt.vec_dot_type, M, K));
        lll::quantize_activations(pool, wt.vec_dot_type, x.data(), M, K, xq.data(), level);
        lll::matmul_q_repacked(pool, t, packed, N, K, xq.data(), M, yp, N, level);
    });
}

// The panels repack_weight makes of N GGUF rows (for matmul_repacked(..., prepacked=True)).
py::array_t<uint8_t> repack_weight_py(const py::array& w, int wtype, int64_t N, int64_t K, int n_threads) {
    const GGMLType t = static_cast<GGMLType>(wtype);
    const U8Array wb = checked_weight_rows("repack_weight", repackable_traits("repack_weight", wtype, lll::best_isa()),
                                           w, N, K);
    py::array_t<uint8_t> out((py::ssize_t)lll::repacked_bytes(t, N, K));
    uint8_t* o = out.mutable_data();
    SharedPool& sp = shared_pool(n_threads);
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(sp.busy);
    lll::repack_weight(sp.pool, t, wb.data(), N, K, o);
    return out;
}

// A gated activation (act(gate) * up) through the model's path (SIMD where compiled) or its
// scalar reference.
using GluFn = void (*)(lll::ThreadPool&, const float*, const float*, float*, int64_t);
using GluRefFn = void (*)(const float*, const float*, float*, int64_t);
py::array_t<float> glu_py(GluFn fast, GluRefFn ref, const char* name, const F32Array& gate,
                          const F32Array& up, bool reference) {
    if (gate.size() != up.size()) throw std::invalid_argument(std::string(name) + ": gate and up differ in size");
    py::array_t<float> out(gate.size());
    float* o = out.mutable_data();
    if (reference) ref(gate.data(), up.data(), o, gate.size());
    else {
        SharedPool& sp = shared_pool(2);
        std::lock_guard<std::mutex> lock(sp.busy);
        fast(sp.pool, gate.data(), up.data(), o, gate.size());
    }
    return out;
}

double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sum of p[lo, hi) with software prefetch as the repacked decode kernels do it (into L2, some
// 16 KiB ahead), so the loop is as fast a reader as they are: the best reader we have is the
// yardstick. (Prefetching 8 KiB ahead into L1, the kernels' earlier scheme, read 5-10% less.)
uint64_t stream_sum(const uint64_t* p, int64_t lo, int64_t hi) {
    uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};   // 8 lanes: vectorizes to wide loads
    for (int64_t i = lo; i < hi; i += 8) {
        __builtin_prefetch(p + i + 2 * lll::kern::kPrefetchAhead / 8, 0, 1);
        for (int j = 0; j < 8; ++j) a[j] += p[i + j];
    }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

// Streaming read bandwidth (GB/s, best of `reps`) of n_threads threads summing a buffer, each
// thread its own contiguous part (first touched by that thread). cpu_clock: time each share by
// its thread's CPU time (bytes / slowest share), i.e. what the threads read while they ran —
// meaningful on a shared machine, where wall time includes time spent descheduled.
double read_bandwidth_py(int64_t nbytes, int n_threads, int reps, bool cpu_clock) {
    if (nbytes < (1 << 20)) throw std::invalid_argument("read_bandwidth: nbytes must be >= 1 MiB");
    if (reps < 1) throw std::invalid_argument("read_bandwidth: reps must be >= 1");
    SharedPool& sp = shared_pool(n_threads);
    const int64_t n = nbytes / 64 * 8;   // uint64 words, a whole number of cache lines
    std::unique_ptr<uint64_t, decltype(&free)> buf((uint64_t*)aligned_alloc(64, n * 8), &free);
    if (!buf) throw std::runtime_error("read_bandwidth: out of memory");
    uint64_t* p = buf.get();
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(sp.busy);
    auto part = [&](int ith, int nth, int64_t* lo, int64_t* hi) {
        *lo = n / nth * ith / 8 * 8;
        *hi = ith == nth - 1 ? n : n / nth * (ith + 1) / 8 * 8;
    };
    sp.pool.run([&](int ith, int nth) {   // first touch by the thread that will read it
        int64_t lo, hi;
        part(ith, nth, &lo, &hi);
        for (int64_t i = lo; i < hi; ++i) p[i] = (uint64_t)i;
    });
    std::vector<uint64_t> sums(n_threads * 8);
    std::vector<double> cpu(n_threads * 8);
    double best = 0.0;
    uint64_t sink = 0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        sp.pool.run([&](int ith, int nth) {
            int64_t lo, hi;
            part(ith, nth, &lo, &hi);
            const double c0 = thread_cpu_seconds();
            sums[ith * 8] = stream_sum(p, lo, hi);
            cpu[ith * 8] = thread_cpu_seconds() - c0;
        });
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (cpu_clock) {
            s = 0.0;
            for (int t = 0; t < n_threads; ++t) s = std::max(s, cpu[t * 8]);
        }
        for (int t = 0; t < n_threads; ++t) sink += sums[t * 8];
        best = std::max(best, (double)(n * 8) / s / 1e9);
    }
    if (sink == 42) best += 0.0;   // keeps the sums alive
    return best;
}

// Mean wall time (ns) of ThreadPool::run minus the job's own duration: every share busy-waits
// for work_ns (0: empty job), like a small decode kernel, after `iters` warm-up calls.
double dispatch_latency_ns_py(int n_threads, int iters, double work_ns) {
    if (iters < 1) throw std::invalid_argument("iters must be >= 1");
    if (work_ns < 0) throw std::invalid_argument("work_ns must be >= 0");
    SharedPool& sp = shared_pool(n_threads);
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(sp.busy);
    // How often each share ran in the current run: every share exactly once per run.
    std::vector<std::atomic<int>> ran(n_threads);
    bool wrong_split = false;
    const auto work = std::chrono::nanoseconds((int64_t)work_ns);
    auto job = [&](int ith, int nth) {
        if (nth != n_threads || ith < 0 || ith >= nth) { wrong_split = true; return; }
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < work) {
        }
        ran[ith].fetch_add(1, std::memory_order_relaxed);
    };
    auto run_checked = [&] {
        for (auto& r : ran) r.store(0, std::memory_order_relaxed);
        sp.pool.run(job);
        // run() returned: every share must have run once, and finished, by now.
        for (int i = 0; i < n_threads; ++i)
            if (ran[i].load() != 1)
                throw std::runtime_error("thread pool ran share " + std::to_string(i) + " " +
                                         std::to_string(ran[i].load()) + " times in one run");
        if (wrong_split) throw std::runtime_error("thread pool passed a wrong share index or count");
    };
    for (int i = 0; i < iters; ++i) run_checked();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) run_checked();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s / iters * 1e9 - work_ns;
}


using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// Attention test harness: a one-layer KVCache of n_blocks blocks of block_size slots gets K/V of
// every token (k, v: [T, n_head_kv, head_dim] at positions[T] of sequences seq_of_token[T] through
// block_tables[n_seqs, max_blocks]); then attention runs for the tokens `query_rows` only (all
// tokens of a sequence, or just its last ones: decode) with their q rows. Returns [Tq, n_head, hd].
py::array_t<float> attention_test_py(const F32Array& q, const F32Array& k, const F32Array& v,
                                     const I32Array& positions, const I32Array& seq_of_token,
                                     const I32Array& block_tables, int64_t n_blocks, int block_size,
                                     const I32Array& query_rows, float scale, int window, int kernel,
                                     int n_threads, const std::string& numerics, float softcap,
                                     const std::string& cache_type_k, const std::string& cache_type_v) {
    if (numerics != "fast" && numerics != "llama.cpp")
        throw std::invalid_argument("attention_test: numerics must be 'fast' or 'llama.cpp'");
    if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3)
        throw std::invalid_argument("attention_test: q, k, v must be 3-D [T, heads, head_dim]");
    const int64_t T = q.shape(0), n_head = q.shape(1), n_head_kv = k.shape(1), hd = q.shape(2);
    if (k.shape(0) != T || v.shape(0) != T || v.shape(1) != n_head_kv || k.shape(2) != hd || v.shape(2) != hd)
        throw std::invalid_argument("attention_test: k and v must both be [T, n_head_kv, head_dim] like q");
    if (positions.ndim() != 1 || positions.shape(0) != T || seq_of_token.ndim() != 1 || seq_of_token.shape(0) != T)
        throw std::invalid_argument("attention_test: positions and seq_of_token must be [T]");
    if (block_tables.ndim() != 2) throw std::invalid_argument("attention_test: block_tables must be [n_seqs, max_blocks]");
    if (kernel < -1 || kernel > 2) throw std::invalid_argument("attention_test: kernel must be -1 (auto), 0 (scalar), 1 (AVX2) or 2 (AVX-512)");
    const int64_t n_seqs = block_tables.shape(0), max_blocks = block_tables.shape(1);
    SharedPool& sp = shared_pool(n_threads);
    const lll::BackendConfig cfg{nullptr, &sp.pool, lll::best_isa(), lll::Numerics::Fast};
    const std::unique_ptr<lll::Backend> host = lll::make_backend(lll::Placement::CPU, cfg);   // KV memory only
    const lll::KVTypes types{lll::parse_cache_type(cache_type_k), lll::parse_cache_type(cache_type_v)};
    lll::KVCache kv({host.get()}, n_blocks, block_size, (int)n_head_kv, (int)hd, types);
    for (int64_t t = 0; t < T; ++t) {   // kv_write trusts its batch: check what it will index
        const int32_t s = seq_of_token.at(t), p = positions.at(t);
        if (s < 0 || s >= n_seqs || p < 0 || p / block_size >= max_blocks)
            throw std::invalid_argument("attention_test: token " + std::to_string(t) + " has a bad sequence or position");
        const int32_t blk = block_tables.at(s, p / block_size);
        if (blk < 0 || blk >= n_blocks) throw std::invalid_argument("attention_test: block id out of range");
    }
    lll::Batch all;
    all.positions = positions.data(), all.seq_of_token = seq_of_token.data(), all.n_tokens = T;
    all.block_tables = block_tables.data(), all.n_seqs = n_seqs, all.max_blocks = max_blocks;
    lll::kv_write(kv, 0, k.data(), v.data(), all);
    const int64_t Tq = query_rows.size();
    std::vector<int32_t> qpos(Tq), qseq(Tq);
    std::vector<float> qsub(Tq * n_head * hd);
    for (int64_t i = 0; i < Tq; ++i) {
        const int32_t t = query_rows.data()[i];
        if (t < 0 || t >= T) throw std::invalid_argument("attention_test: query row out of range");
        qpos[i] = positions.at(t), qseq[i] = seq_of_token.at(t);
        memcpy(&qsub[i * n_head * hd], q.data() + t * n_head * hd, n_head * hd * sizeof(float));
    }
    lll::Batch qb = all;
    qb.positions = qpos.data(), qb.seq_of_token = qseq.data(), qb.n_tokens = Tq;
    py::array_t<float> out({Tq, n_head, hd});
    float* op = out.mutable_data();
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(sp.busy);
    if (numerics == "llama.cpp")
        lll::attention_ggml(sp.pool, kv, 0, qsub.data(), op, qb, (int)n_head, (int)n_head_kv, (int)hd, scale, window,
                            softcap, static_cast<lll::AttnKernel>(kernel));
    else
        lll::attention(sp.pool, kv, 0, qsub.data(), op, qb, (int)n_head, (int)n_head_kv, (int)hd, scale, window,
                       softcap, static_cast<lll::AttnKernel>(kernel));
    return out;
}

}  // namespace

void register_kernels(py::module_& m) {
    m.def("matmul_repacked", &matmul_repacked_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("x"), py::arg("n_threads") = 2, py::arg("prepacked") = false, py::arg("isa") = -1,
          "matmul with the weight first repacked into 16-row panels (bit-identical to matmul at that ISA"
          " level, -1: the best); prepacked: w is repack_weight's output.");
    m.def("repack_weight", &repack_weight_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("n_threads") = 2, "The 16-row panels a model stores for N GGUF rows of K elements.");
    m.def("matmul_llamacpp", &matmul_llamacpp_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("x"), py::arg("n_threads") = 2, py::arg("reference") = false,
          "Y = x . w^T in llama.cpp's float order (legacy types, Q4_K, Q6_K), or its scalar reference.");
    m.def("geglu", [](const F32Array& g, const F32Array& u, bool reference) {
              return glu_py(lll::geglu, lll::geglu_reference, "geglu", g, u, reference);
          }, py::arg("gate"), py::arg("up"), py::arg("reference") = false,
          "gelu(gate) * up as the model computes it (F16 GELU table), or through the scalar reference.");
    m.def("rms_norm", [](const F32Array& x, const F32Array& w, float eps, bool reference) {
              if (x.size() != w.size()) throw std::invalid_argument("rms_norm: x and w differ in size");
              py::array_t<float> y(x.size());
              (reference ? lll::rms_norm_reference : lll::rms_norm)(x.data(), w.data(), y.mutable_data(), x.size(), eps);
              return y;
          }, py::arg("x"), py::arg("w"), py::arg("eps"), py::arg("reference") = false,
          "x / sqrt(mean(x^2) + eps) * w as the model computes it, or through the scalar reference.");
    m.def("swiglu", [](const F32Array& g, const F32Array& u, bool reference) {
              return glu_py(lll::swiglu, lll::swiglu_reference, "swiglu", g, u, reference);
          }, py::arg("gate"), py::arg("up"), py::arg("reference") = false,
          "silu(gate) * up as the model computes it, or through the scalar reference.");
    m.def("amx_available", &lll::bseq::amx_available,
          "AMX tiles usable (CPU, OS permission, not disabled by LOCALLLM_NO_AMX=1): prompt GEMMs use them.");
    m.def("best_isa", [] { return static_cast<int>(lll::best_isa()); },
          "Fastest kernel level compiled in and supported here: 0 scalar, 1 avx2, 2 avx512.");
    m.def("build_target", [] {
#if defined(__AVX512F__) && defined(__AVX512VL__)
        return "avx512";
#elif defined(__AVX2__)
        return "avx2";
#else
        return "baseline";
#endif
    }, "The instruction set the whole module was compiled for (-march). A level capped below it by "
       "LOCALLLM_ISA still runs code compiled for it: AVX2 kernels in an AVX-512 build have 32 vector "
       "registers and EVEX encodings, which an AVX2-only CPU's build lacks.");
    m.def("isa_available", [](int isa) {
        return isa >= 0 && isa <= 2 && lll::isa_available(static_cast<Isa>(isa));
    }, py::arg("isa"), "Whether kernel level `isa` is compiled in and supported by this CPU.");
    m.def("isa_name", [](int isa) {
        if (isa < 0 || isa > 2) throw std::invalid_argument("isa must be 0, 1 or 2");
        return std::string(lll::isa_name(static_cast<Isa>(isa)));
    }, py::arg("isa"));
    m.def("vec_dot_isa", [](int wtype, int isa) {
        traits_from_int(wtype);
        const lll::kern::KernelSet* ks = lll::kern::find_kernels(static_cast<GGMLType>(wtype), isa_from_int(isa, true));
        if (!ks) throw std::invalid_argument("no dot product for this weight type");
        return static_cast<int>(ks->isa);
    }, py::arg("wtype"), py::arg("isa"),
          "Level whose kernel vec_dot/matmul actually use for wtype when asked for `isa` (lower when the type falls back).");
    m.def("quantize_act", &quantize_act_py, py::arg("x"), py::arg("vec_dot_type"), py::arg("isa") = -1,
          "Quantize one f32 activation row to vec_dot_type (Q8_0, Q8_1, Q8_K, F16, BF16, F32) as ggml's x86 CPU backend does; raw bytes.");
    m.def("vec_dot", &vec_dot_py, py::arg("wtype"), py::arg("w_row_bytes"), py::arg("x_act_bytes"), py::arg("n"),
          py::arg("isa") = -1, "Dot product of one weight row (raw bytes) with one activation row in the weight's vec_dot_type.");
    m.def("matmul", &matmul_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"), py::arg("x"),
          py::arg("n_threads") = 2, py::arg("isa") = -1,
          "Y[M, N] = X[M, K] . W[N, K]^T with W raw blocks [N, row_bytes]; activations quantized to the weight's vec_dot_type.");
    m.def("attention_test", &attention_test_py, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("positions"),
          py::arg("seq_of_token"), py::arg("block_tables"), py::arg("n_blocks"), py::arg("block_size"),
          py::arg("query_rows"), py::arg("scale"), py::arg("window") = 0, py::arg("kernel") = -1,
          py::arg("n_threads") = 2, py::arg("numerics") = "fast", py::arg("softcap") = 0.0f,
          py::arg("cache_type_k") = "f16", py::arg("cache_type_v") = "f16",
          "Test harness: writes K/V of all tokens to a fresh paged cache (of types cache_type_k / "
          "cache_type_v: f16, q8_0, q4_0), runs attention for query_rows; "
          "kernel -1 auto, 0 scalar, 1 avx2, 2 avx512; softcap > 0 soft-caps the scores; numerics 'fast' or 'llama.cpp' (whose kernel order "
          "depends on len(query_rows): one row or more). Returns [len(query_rows), n_head, head_dim].");
    m.def("attention_avx512_available", &lll::attention_avx512_available,
          "Whether the AVX-512 attention kernel is compiled in and supported here.");
    m.def("attention_avx2_available", &lll::attention_avx2_available,
          "Whether the AVX2 attention kernel is compiled in and this CPU runs it.");
    m.def("attention_exp", [](const F32Array& x) {
        // Defined for x <= 0 only (softmax subtracts the maximum first): a positive x would
        // scale by 2^n past the float exponent (UBSan: float -> int overflow in the scalar form).
        for (py::ssize_t i = 0; i < x.size(); ++i)
            if (x.data()[i] > 0.0f)
                throw py::value_error("attention_exp: x[" + std::to_string(i) + "] = " + std::to_string(x.data()[i]) +
                                      " is positive; it is defined for x <= 0");
        py::array_t<float> y(x.size());
        for (py::ssize_t i = 0; i < x.size(); ++i) y.mutable_data()[i] = lll::attention_exp(x.data()[i]);
        return y;
    }, py::arg("x"), "The softmax exp of attention (scalar reference of the SIMD one), elementwise on a 1-D array of x <= 0.");
    m.def("read_bandwidth", &read_bandwidth_py, py::arg("nbytes"), py::arg("n_threads") = 2, py::arg("reps") = 3,
          py::arg("cpu_clock") = false,
          "Streaming read bandwidth in GB/s (best of reps) over an nbytes buffer with n_threads threads; "
          "cpu_clock: per-thread CPU time instead of wall time.");
    m.def("threadpool_dispatch_ns", &dispatch_latency_ns_py, py::arg("n_threads") = 2, py::arg("iters") = 2000,
          py::arg("work_ns") = 0.0,
          "Mean overhead in ns of ThreadPool::run (wall time minus work_ns) when each share busy-waits work_ns; raises if a run skips, repeats or has not finished a share when it returns.");
}
