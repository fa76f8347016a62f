// bind_matmul.cpp — the dot-product kernels one entry at a time: activation quantization, single
// dot products, matmul (GGUF rows, repacked panels, llama.cpp's float order), for
// tests/test_kernels.py, test_isa_paths.py, test_llamacpp_numerics.py and benchmarks/matvec.py.
#include "bindings/harness/harness.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/ggml_numerics/ggml_order.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/quants/dot/dot_impl.h"

namespace py = pybind11;
using lll::GGMLType;
using lll::Isa;
using namespace lll::harness;

namespace {

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

}  // namespace

void register_matmul_harness(py::module_& m) {
    m.def("quantize_act", &quantize_act_py, py::arg("x"), py::arg("vec_dot_type"), py::arg("isa") = -1,
          "Quantize one f32 activation row to vec_dot_type (Q8_0, Q8_1, Q8_K, F16, BF16, F32) as ggml's x86 CPU backend does; raw bytes.");
    m.def("vec_dot", &vec_dot_py, py::arg("wtype"), py::arg("w_row_bytes"), py::arg("x_act_bytes"), py::arg("n"),
          py::arg("isa") = -1, "Dot product of one weight row (raw bytes) with one activation row in the weight's vec_dot_type.");
    m.def("vec_dot_isa", [](int wtype, int isa) {
        traits_from_int(wtype);
        const lll::kern::KernelSet* ks = lll::kern::find_kernels(static_cast<GGMLType>(wtype), isa_from_int(isa, true));
        if (!ks) throw std::invalid_argument("no dot product for this weight type");
        return static_cast<int>(ks->isa);
    }, py::arg("wtype"), py::arg("isa"),
          "Level whose kernel vec_dot/matmul actually use for wtype when asked for `isa` (lower when the type falls back).");
    m.def("matmul", &matmul_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"), py::arg("x"),
          py::arg("n_threads") = 2, py::arg("isa") = -1,
          "Y[M, N] = X[M, K] . W[N, K]^T with W raw blocks [N, row_bytes]; activations quantized to the weight's vec_dot_type.");
    m.def("matmul_llamacpp", &matmul_llamacpp_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("x"), py::arg("n_threads") = 2, py::arg("reference") = false,
          "Y = x . w^T in llama.cpp's float order (legacy types, Q4_K, Q6_K), or its scalar reference.");
    m.def("matmul_repacked", &matmul_repacked_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("x"), py::arg("n_threads") = 2, py::arg("prepacked") = false, py::arg("isa") = -1,
          "matmul with the weight first repacked into 16-row panels (bit-identical to matmul at that ISA"
          " level, -1: the best); prepacked: w is repack_weight's output.");
    m.def("repack_weight", &repack_weight_py, py::arg("w"), py::arg("wtype"), py::arg("N"), py::arg("K"),
          py::arg("n_threads") = 2, "The 16-row panels a model stores for N GGUF rows of K elements.");
}
