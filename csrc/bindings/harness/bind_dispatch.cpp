// bind_dispatch.cpp — every dispatch of every registered type, called once on real blocks: the
// check (tests/test_type_dispatch.py) that a type the registry claims support for is served by
// every table and switch that reads it — conversions, activation quantizers per level, dot-product
// kernel sets and tiles per level, and for block-sequential types the reference fold, the
// repacker and the repacked kernels (bit-identical to the GGUF-row kernels at the same level).
#include "bindings/harness/harness.h"

#include <math.h>
#include <string.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cpu/quants/bseq/bseq.h"
#include "backends/cpu/quants/dot/dot_impl.h"

using namespace lll;
using namespace lll::harness;

namespace {

constexpr int64_t kRows = kern::kMaxTile > bseq::kPanel ? kern::kMaxTile : bseq::kPanel;   // one panel
constexpr int64_t kK = 2 * QK_K;   // a whole number of blocks of every type
constexpr int64_t kActRows = 5;    // more than one: the prompt kernels, not only decode's

const Isa kLevels[] = {Isa::Scalar, Isa::AVX2, Isa::AVX512, Isa::Neon, Isa::Dotprod, Isa::I8mm};   // unavailable ones skipped

std::vector<float> test_values(int64_t n, float phase) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; ++i) v[(size_t)i] = sinf(0.37f * (float)i + phase) * (1.0f + (float)(i % 7));
    return v;
}

int64_t row_bytes_of(const TypeTraits& t, int64_t n) { return n / t.block_elems * t.block_bytes; }

// Collects "TYPE dispatch (level): what went wrong" for each dispatch that throws or is missing.
class Checker {
public:
    void check(const TypeTraits& t, const std::string& what, const std::function<std::string()>& fn) {
        std::string problem;
        try {
            problem = fn();
        } catch (const std::exception& e) {
            problem = e.what();
        }
        if (!problem.empty()) failures_.push_back(std::string(t.name) + " " + what + ": " + problem);
    }
    const std::vector<std::string>& failures() const { return failures_; }
private:
    std::vector<std::string> failures_;
};

std::string at(const char* what, Isa level) { return std::string(what) + " (" + isa_name(level) + ")"; }

// kRows rows of t holding quantized test values (zeros for a type that only dequantizes).
std::vector<uint8_t> weight_rows(const TypeTraits& t) {
    std::vector<uint8_t> w((size_t)(kRows * row_bytes_of(t, kK)));
    if (t.quantize) {
        const std::vector<float> x = test_values(kRows * kK, 0.5f);
        quantize_row_ref(t.id, x.data(), w.data(), kRows * kK);
    }
    return w;
}

void check_conversions(Checker& c, const TypeTraits& t, const std::vector<uint8_t>& w) {
    if (t.dequantize)
        c.check(t, "dequantize", [&] {
            std::vector<float> y((size_t)kK);
            dequantize_row(t.id, w.data(), y.data(), kK);
            return std::string();
        });
}

// An activation type's quantizers write the scalar level's bytes at every level.
void check_activation(Checker& c, const TypeTraits& t) {
    const std::vector<float> x = test_values(kK, 1.5f);
    std::vector<uint8_t> ref((size_t)row_bytes_of(t, kK)), got(ref.size());
    for (Isa level : kLevels) {
        if (!isa_available(level)) continue;
        c.check(t, at("quantize_act_row", level), [&] {
            quantize_act_row(t.id, x.data(), (level == Isa::Scalar ? ref : got).data(), kK, level);
            return level == Isa::Scalar || got == ref ? std::string() : std::string("bytes differ from the scalar level's");
        });
    }
}

void check_kernels(Checker& c, const TypeTraits& t, const std::vector<uint8_t>& w) {
    const TypeTraits& act = *type_traits(t.vec_dot_type);
    const std::vector<float> x = test_values(kK, 2.5f);
    std::vector<uint8_t> xq((size_t)row_bytes_of(act, kK));
    for (Isa level : kLevels) {
        if (!isa_available(level)) continue;
        c.check(t, at("kernel set", level), [&] {
            const kern::KernelSet* ks = kern::find_kernels(t.id, level);
            if (!ks || !vec_dot_fn(t.id, level)) return std::string("none");
            for (int r = 0; r < ks->max_r; ++r)
                for (int col = 0; col < ks->max_c; ++col)
                    if (!ks->tile[r][col]) return "no " + std::to_string(r + 1) + "x" + std::to_string(col + 1) + " tile";
            quantize_act_row(t.vec_dot_type, x.data(), xq.data(), kK, level);
            const float y = vec_dot_fn(t.id, level)(kK, w.data(), xq.data());
            return std::isfinite(y) ? std::string() : std::string("vec_dot is not finite");
        });
    }
}

// matmul_q on the GGUF rows, or matmul_q_repacked on their panels, at one level: [kActRows, kRows].
std::vector<float> matmul_at(const TypeTraits& t, const std::vector<uint8_t>& w, Isa level, bool repacked) {
    SharedPool& sp = shared_pool(2);
    std::lock_guard<std::mutex> lock(sp.busy);
    const std::vector<float> x = test_values(kActRows * kK, 3.5f);
    std::vector<uint8_t> xq(act_buffer_bytes(t.vec_dot_type, kActRows, kK));
    quantize_activations(sp.pool, t.vec_dot_type, x.data(), kActRows, kK, xq.data(), level);
    std::vector<float> y((size_t)(kActRows * kRows));
    if (!repacked) {
        matmul_q(sp.pool, t.id, w.data(), kRows, kK, xq.data(), kActRows, y.data(), kRows, level);
        return y;
    }
    std::vector<uint8_t> panels(repacked_bytes(t.id, kRows, kK));
    repack_weight(sp.pool, t.id, w.data(), kRows, kK, panels.data());
    matmul_q_repacked(sp.pool, t.id, panels.data(), kRows, kK, xq.data(), kActRows, y.data(), kRows, level);
    return y;
}

void check_block_sequential(Checker& c, const TypeTraits& t, const std::vector<uint8_t>& w) {
    c.check(t, "bseq::dot_ref", [&] {
        const std::vector<float> x = test_values(kK, 4.5f);
        std::vector<uint8_t> xq((size_t)row_bytes_of(*type_traits(t.vec_dot_type), kK));
        quantize_act_row(t.vec_dot_type, x.data(), xq.data(), kK, Isa::Scalar);
        return std::isfinite(bseq::dot_ref(t.id, kK, w.data(), xq.data())) ? std::string() : std::string("not finite");
    });
    c.check(t, "bseq::repack_panels_portable", [&] {
        std::vector<uint8_t> panels(repacked_bytes(t.id, kRows, kK));
        bseq::repack_panels_portable(t.id, w.data(), (size_t)row_bytes_of(t, kK), kRows, kK, panels.data(), 0, 1);
        return std::string();
    });
    for (Isa level : {Isa::AVX2, Isa::AVX512}) {
        if (!isa_available(level)) continue;
        c.check(t, at("repacked matmul", level), [&] {
            if (!can_repack(t.id, level)) return std::string("not repacked at this level");
            return matmul_at(t, w, level, true) == matmul_at(t, w, level, false)
                       ? std::string() : std::string("differs from the GGUF-row matmul");
        });
    }
}

py::list type_dispatch_failures() {
    Checker c;
    int n = 0;
    const TypeTraits* const* types = supported_types(&n);
    for (int i = 0; i < n; ++i) {
        const TypeTraits& t = *types[i];
        const std::vector<uint8_t> w = weight_rows(t);
        check_conversions(c, t, w);
        if (t.act_quant[0]) check_activation(c, t);
        if (t.kernels[0]) check_kernels(c, t, w);
        if (t.repackable()) check_block_sequential(c, t, w);
    }
    py::list out;
    for (const std::string& f : c.failures()) out.append(f);
    return out;
}

}  // namespace

void register_dispatch_harness(py::module_& m) {
    m.def("type_dispatch_failures", &type_dispatch_failures,
          "Calls every dispatch each registered type claims (conversions, activation quantizers, kernel sets and "
          "tiles at each available level, block-sequential fold, repacker and repacked kernels); returns one "
          "line per dispatch that is missing or fails (empty: all served).");
}
