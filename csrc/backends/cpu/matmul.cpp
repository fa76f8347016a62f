// matmul.cpp — Y[M, N] = X[M, K] . W[N, K]^T on the thread pool, with tile kernels.
//
// Work split (tile kernels, matmul_tile_jobs): units of one activation block (kActBlock rows,
// kept hot in L2) by one run of kTileRun weight rows go to the threads from a shared counter, so
// a thread slowed by other work on the machine leaves its runs to the others. Inside a unit the
// run is walked in tiles of R weight rows x C activation rows (the kernel set's largest tile;
// edges use smaller tiles), or, where the kernel set has a unit kernel (AVX2 IQ4_NL and low-bit
// i-quants) and the unit enough activation rows, by that kernel at once (kUnitActBlock rows a
// unit). Every tile and unit kernel computes each (m, n) pair with the same operations as the
// 1 x 1 kernel, so Y[m, n] is independent of M, of m's position, of the tile shape, of the thread
// count and of the matrices that share the region.
#include "backends/cpu/matmul.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/quants/bseq/bseq.h"
#include "backends/cpu/quants/dot/dot_impl.h"

namespace lll {

namespace {

constexpr int64_t kRowAlign = 16;     // fewer than twice this many weight rows: one thread
constexpr int64_t kActBlock = 64;     // activation rows kept hot while weight runs stream past
// A unit kernel (KernelSet::unit) streams its activation rows a chunk of K at a time against
// weights it unpacked once, so it takes more rows per unit to spread the unpacking.
constexpr int64_t kUnitActBlock = 256;
constexpr int64_t kSerialWork = 1 << 15;   // below this many weight elements x rows: one thread

const TypeTraits& traits_or_throw(GGMLType t, const char* what) {
    const TypeTraits* tt = type_traits(t);
    if (!tt) throw std::invalid_argument(std::string(what) + ": unknown type id " +
                                         std::to_string(static_cast<uint32_t>(t)));
    return *tt;
}

int64_t row_bytes(const TypeTraits& tt, int64_t K, const char* what) {
    if (K <= 0 || K % tt.block_elems != 0)
        throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(K) +
                                    " is not a positive multiple of the " + tt.name +
                                    " block size " + std::to_string(tt.block_elems));
    return K / tt.block_elems * tt.block_bytes;
}

// Runs fn on the pool, or inline when the job is too small to be worth a hand-off.
void run_maybe_parallel(ThreadPool& pool, bool parallel, const std::function<void(int, int)>& fn) {
    if (parallel && pool.size() > 1) pool.run(fn);
    else fn(0, 1);
}

}  // namespace

size_t act_buffer_bytes(GGMLType vec_dot_type, int64_t M, int64_t K) {
    const TypeTraits& tt = traits_or_throw(vec_dot_type, "act_buffer_bytes");
    if (M < 0) throw std::invalid_argument("act_buffer_bytes: M must be >= 0");
    return (size_t)(M * row_bytes(tt, K, "act_buffer_bytes"));
}

void quantize_activations(ThreadPool& pool, GGMLType vec_dot_type, const float* X, int64_t M,
                          int64_t K, void* Xq, Isa isa) {
    const TypeTraits& tt = traits_or_throw(vec_dot_type, "quantize_activations");
    const int64_t xrb = row_bytes(tt, K, "quantize_activations");
    if (M < 0) throw std::invalid_argument("quantize_activations: M must be >= 0");
    if (M == 0) return;
    // One row through the checked entry point first: it validates type and ISA once.
    quantize_act_row(vec_dot_type, X, Xq, K, isa);
    uint8_t* out = (uint8_t*)Xq;
    run_maybe_parallel(pool, (M - 1) * K >= kSerialWork, [&](int ith, int nth) {
        for (int64_t m = 1 + ith; m < M; m += nth) quantize_act_row(vec_dot_type, X + m * K, out + m * xrb, K, isa);
    });
}

namespace {

// Block-sequential types (quants/bseq.h): activations split once per weight type, then the
// threads run the panel kernels over the 16-row weight panels of one or more matrices.
struct BseqJob {
    GGMLType wtype;
    const uint8_t* w;
    int64_t wrb, N;
    float* Y;
    int64_t ldy;
    bool repacked;
};

constexpr int kMaxJobs = 4;   // matrices per parallel region (q/k/v: 3)

// The level whose block-sequential kernels run wtype when `isa` is asked for (AVX-512 or AVX2,
// for every repackable type); Scalar when none does (the tile kernels run). The one place that
// decides: matmul_q, can_repack and the repacked entry points ask it.
Isa bseq_level(GGMLType wtype, Isa isa) {
    const TypeTraits* tt = type_traits(wtype);
    const kern::KernelSet* ks = tt && tt->repackable() ? kern::find_kernels(wtype, isa) : nullptr;
    return ks && (ks->isa == Isa::AVX512 || ks->isa == Isa::AVX2) ? ks->isa : Isa::Scalar;
}

void matmul_bseq_jobs(ThreadPool& pool, const BseqJob* jobs, int n_jobs, int64_t K, const uint8_t* x,
                      int64_t xrb, int64_t M, Isa level) {
    if (n_jobs > kMaxJobs) throw std::logic_error("matmul_bseq_jobs: too many matrices in one region");
    thread_local std::vector<uint8_t> scratch[kMaxJobs];   // no allocation per decode step
    bseq::ActPack packs[kMaxJobs];
    int64_t first_panel[kMaxJobs + 1] = {0};   // panels of jobs [0, j) come first
    int64_t work = 0;
    for (int j = 0; j < n_jobs; ++j) {
        const BseqJob& J = jobs[j];
        first_panel[j + 1] = first_panel[j] + (J.N + bseq::kPanel - 1) / bseq::kPanel;
        work += J.N * K * M;
        int same = 0;   // a matrix of the same type earlier in the group: its split serves
        while (same < j && jobs[same].wtype != J.wtype) ++same;
        if (same < j) {
            packs[j] = packs[same];
            continue;
        }
        const size_t need = bseq::act_pack_bytes(J.wtype, M, K);
        if (scratch[j].size() < need) scratch[j].resize(need);
        bseq::act_pack_init(J.wtype, M, K, scratch[j].data(), &packs[j]);
        run_maybe_parallel(pool, M * K >= kSerialWork, [&](int ith, int nth) {
            bseq::act_pack_rows(J.wtype, x, (size_t)xrb, M * ith / nth, M * (ith + 1) / nth, &packs[j]);
        });
    }
    static const bool amx = bseq::amx_available();
    const int64_t panels = first_panel[n_jobs];
    // Threads take runs of panels from a shared counter rather than a fixed half each: on a
    // shared machine one thread often runs slower, and a fixed split left the other spinning at
    // the barrier (10% of a decode step). Runs shrink as the work runs out (a quarter of what is
    // left per thread), so the last one is short: fixed runs of an eighth left one thread alone
    // on a 0.5 ms run at the end of Gemma3's output matrix. Which thread computes a panel changes
    // no bit of it. A run ends where its matrix does.
    std::atomic<int64_t> next_panel{0};
    run_maybe_parallel(pool, work >= kSerialWork && panels >= 2, [&](int ith, int nth) {
        int j = 0;
        int64_t p0 = next_panel.load(std::memory_order_relaxed);
        while (p0 < panels) {
            const int64_t run = std::max<int64_t>(2, (panels - p0) / (4 * nth));
            if (!next_panel.compare_exchange_weak(p0, p0 + run, std::memory_order_relaxed)) continue;
            const int64_t p_end = std::min(panels, p0 + run);
            while (p0 < p_end) {
                while (first_panel[j + 1] <= p0) ++j;
                const BseqJob& J = jobs[j];
                const int64_t q0 = p0 - first_panel[j], q1 = std::min(p_end, first_panel[j + 1]) - first_panel[j];
                const int64_t n0 = q0 * bseq::kPanel, n1 = std::min(J.N, q1 * bseq::kPanel);
                if (level == Isa::AVX512)
                    bseq::matmul_avx512(J.wtype, J.w, (size_t)J.wrb, J.N, n0, n1, packs[j], J.Y, J.ldy, amx, J.repacked);
                else
                    bseq::matmul_avx2(J.wtype, J.w, (size_t)J.wrb, J.N, n0, n1, packs[j], J.Y, J.ldy, J.repacked);
                p0 = first_panel[j] + q1;
            }
            p0 = next_panel.load(std::memory_order_relaxed);
        }
    });
}

void matmul_bseq(ThreadPool& pool, GGMLType wtype, const uint8_t* w, int64_t wrb, int64_t N, int64_t K,
                 const uint8_t* x, int64_t xrb, int64_t M, float* Y, int64_t ldy, bool repacked, Isa level) {
    const BseqJob job{wtype, w, wrb, N, Y, ldy, repacked};
    matmul_bseq_jobs(pool, &job, 1, K, x, xrb, M, level);
}

// The bseq level of a repacked weight's type at `isa`; repacked weights have one.
Isa repacked_level(GGMLType wtype, Isa isa, const char* what) {
    const Isa level = bseq_level(wtype, isa);
    if (level == Isa::Scalar)
        throw std::invalid_argument(std::string(what) + ": weight type " + traits_or_throw(wtype, what).name +
                                    " is not repacked at ISA level " + isa_name(isa));
    return level;
}

// ---- tile kernels (the types without block-sequential kernels: F32, F16, BF16, Q2_K, ...) ----
//
// Units of (activation block, run of kTileRun weight rows) go to the threads from a shared
// counter, block-major, as in matmul_bseq_jobs: on a shared machine a slow thread leaves its runs
// to the others instead of holding the rest at the barrier. Several matrices on the same
// quantized X (q/k/v) share one region, and each unit adds its rows' biases while they are hot.
// Every (m, n) comes out of the same tile kernel whatever the unit, thread or group.
constexpr int64_t kTileRun = 16;   // weight rows per claim

struct TileJob {
    const uint8_t* w;
    int64_t wrb, N;
    float* Y;
    int64_t ldy;
    const float* bias;   // or null
};

// Y[m, n0..n1) (+ bias) of one job for activation rows [m0, m1).
void tile_unit(const kern::KernelSet& ks, const TileJob& J, int64_t K, const uint8_t* x, int64_t xrb, int64_t M,
               int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    if (ks.unit && m1 - m0 >= ks.unit_min_rows) {
        ks.unit(K, J.w + n0 * J.wrb, (size_t)J.wrb, n1 - n0, x + m0 * xrb, (size_t)xrb, m1 - m0,
                J.Y + m0 * J.ldy + n0, J.ldy);
    } else {
        const int64_t R = M == 1 ? ks.decode_r : ks.max_r, C = ks.max_c;
        for (int64_t n = n0; n < n1; n += R) {
            const int64_t r = std::min(R, n1 - n);
            for (int64_t m = m0; m < m1; m += C)
                ks.tile[r - 1][std::min(C, m1 - m) - 1](K, J.w + n * J.wrb, (size_t)J.wrb, x + m * xrb, (size_t)xrb,
                                                        J.Y + m * J.ldy + n, J.ldy);
        }
    }
    if (J.bias)   // the same float additions add_bias_rows makes after a matmul
        for (int64_t m = m0; m < m1; ++m)
            for (int64_t n = n0; n < n1; ++n) J.Y[m * J.ldy + n] += J.bias[n];
}

void matmul_tile_jobs(ThreadPool& pool, const kern::KernelSet& ks, const TileJob* jobs, int n_jobs, int64_t K,
                      const uint8_t* x, int64_t xrb, int64_t M) {
    if (n_jobs > kMaxJobs) throw std::logic_error("matmul_tile_jobs: too many matrices in one region");
    int64_t first_run[kMaxJobs + 1] = {0};   // runs of jobs [0, j) come first in a block
    int64_t rows = 0;
    for (int j = 0; j < n_jobs; ++j) {
        first_run[j + 1] = first_run[j] + (jobs[j].N + kTileRun - 1) / kTileRun;
        rows += jobs[j].N;
    }
    const int64_t act_block = ks.unit ? kUnitActBlock : kActBlock;
    const int64_t runs = first_run[n_jobs], units = (M + act_block - 1) / act_block * runs;
    std::atomic<int64_t> next_unit{0};
    run_maybe_parallel(pool, rows * K * M >= kSerialWork && rows >= 2 * kRowAlign, [&](int, int) {
        for (int64_t u = next_unit.fetch_add(1); u < units; u = next_unit.fetch_add(1)) {
            const int64_t run = u % runs, m0 = u / runs * act_block, m1 = std::min(M, m0 + act_block);
            int j = 0;
            while (first_run[j + 1] <= run) ++j;
            const int64_t n0 = (run - first_run[j]) * kTileRun, n1 = std::min(jobs[j].N, n0 + kTileRun);
            tile_unit(ks, jobs[j], K, x, xrb, M, n0, n1, m0, m1);
        }
    });
}

}  // namespace

void matmul_q(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K,
              const void* Xq, int64_t M, float* Y, int64_t ldy, Isa isa) {
    const TypeTraits& wt = traits_or_throw(wtype, "matmul_q");
    const int64_t wrb = row_bytes(wt, K, "matmul_q");
    const int64_t xrb = row_bytes(traits_or_throw(wt.vec_dot_type, "matmul_q"), K, "matmul_q");
    if (M < 0 || N < 0) throw std::invalid_argument("matmul_q: M and N must be >= 0");
    if (ldy < N) throw std::invalid_argument("matmul_q: ldy must be >= N");
    if (!isa_available(isa))
        throw std::invalid_argument(std::string("matmul_q: ISA level ") + isa_name(isa) + " is not available");
    const kern::KernelSet* ks = kern::find_kernels(wtype, isa);
    if (!ks) throw std::invalid_argument(std::string("matmul_q: no dot product for weight type ") + wt.name);
    if (M == 0 || N == 0) return;

    const uint8_t* w = (const uint8_t*)W;
    const uint8_t* x = (const uint8_t*)Xq;
    if (const Isa level = bseq_level(wtype, isa); level != Isa::Scalar) {
        matmul_bseq(pool, wtype, w, wrb, N, K, x, xrb, M, Y, ldy, false, level);
        return;
    }
    const TileJob job{w, wrb, N, Y, ldy, nullptr};
    matmul_tile_jobs(pool, *ks, &job, 1, K, x, xrb, M);
}

bool can_repack(GGMLType wtype, Isa isa) { return bseq_level(wtype, isa) != Isa::Scalar; }

bool runs_tiles(GGMLType wtype, Isa isa) {
    return isa_available(isa) && kern::find_kernels(wtype, isa) && bseq_level(wtype, isa) == Isa::Scalar;
}

size_t repacked_bytes(GGMLType wtype, int64_t N, int64_t K) {
    const int64_t wrb = row_bytes(traits_or_throw(wtype, "repacked_bytes"), K, "repacked_bytes");
    return bseq::repacked_bytes(wtype, N, (size_t)wrb);
}

void repack_weight(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K, uint8_t* dst) {
    const TypeTraits& wt = traits_or_throw(wtype, "repack_weight");
    const int64_t wrb = row_bytes(wt, K, "repack_weight");
    if (N <= 0) throw std::invalid_argument("repack_weight: N must be > 0");
    const int64_t panels = (N + bseq::kPanel - 1) / bseq::kPanel;
    run_maybe_parallel(pool, panels >= 2, [&](int ith, int nth) {
        const int64_t p0 = panels * ith / nth, p1 = panels * (ith + 1) / nth;
        if (!isa_available(Isa::AVX512))   // the same bytes, without AVX-512
            bseq::repack_panels_portable(wtype, (const uint8_t*)W, (size_t)wrb, N, K, dst, p0, p1);
        else
            bseq::repack_panels(wtype, (const uint8_t*)W, (size_t)wrb, N, K, dst, p0, p1);
    });
}

void matmul_q_repacked(ThreadPool& pool, GGMLType wtype, const void* Wr, int64_t N, int64_t K,
                       const void* Xq, int64_t M, float* Y, int64_t ldy, Isa isa) {
    const TypeTraits& wt = traits_or_throw(wtype, "matmul_q_repacked");
    const int64_t wrb = row_bytes(wt, K, "matmul_q_repacked");
    const int64_t xrb = row_bytes(traits_or_throw(wt.vec_dot_type, "matmul_q_repacked"), K, "matmul_q_repacked");
    if (M < 0 || N < 0 || ldy < N) throw std::invalid_argument("matmul_q_repacked: bad M, N or ldy");
    if (M == 0 || N == 0) return;
    matmul_bseq(pool, wtype, (const uint8_t*)Wr, wrb, N, K, (const uint8_t*)Xq, xrb, M, Y, ldy, true,
                repacked_level(wtype, isa, "matmul_q_repacked"));
}

void matmul_q_repacked_group(ThreadPool& pool, const RepackedMatmul* jobs, int n_jobs, int64_t K,
                             const void* Xq, int64_t M, Isa isa) {
    if (n_jobs <= 0) return;
    const GGMLType vdt = traits_or_throw(jobs[0].wtype, "matmul_q_repacked_group").vec_dot_type;
    const int64_t xrb = row_bytes(traits_or_throw(vdt, "matmul_q_repacked_group"), K, "matmul_q_repacked_group");
    if (M < 0) throw std::invalid_argument("matmul_q_repacked_group: M must be >= 0");
    BseqJob bj[kMaxJobs];
    const Isa level = repacked_level(jobs[0].wtype, isa, "matmul_q_repacked_group");
    int n = 0;
    for (int j = 0; j < n_jobs; ++j) {
        const RepackedMatmul& J = jobs[j];
        const TypeTraits& wt = traits_or_throw(J.wtype, "matmul_q_repacked_group");
        if (wt.vec_dot_type != vdt)
            throw std::invalid_argument("matmul_q_repacked_group: the weights need different activation types");
        if (J.N < 0 || J.ldy < J.N) throw std::invalid_argument("matmul_q_repacked_group: bad N or ldy");
        if (repacked_level(J.wtype, isa, "matmul_q_repacked_group") != level)
            throw std::invalid_argument("matmul_q_repacked_group: the weights run at different ISA levels");
        if (J.N > 0) bj[n++] = {J.wtype, (const uint8_t*)J.Wr, row_bytes(wt, K, "matmul_q_repacked_group"), J.N, J.Y, J.ldy, true};
        if (M > 0 && n > 0 && (n == kMaxJobs || j == n_jobs - 1)) {
            matmul_bseq_jobs(pool, bj, n, K, (const uint8_t*)Xq, xrb, M, level);
            n = 0;
        }
    }
}

void matmul_q_group(ThreadPool& pool, const TileMatmul* jobs, int n_jobs, int64_t K, const void* Xq, int64_t M,
                    Isa isa) {
    if (n_jobs <= 0 || M <= 0) return;
    const GGMLType vdt = traits_or_throw(jobs[0].wtype, "matmul_q_group").vec_dot_type;
    const int64_t xrb = row_bytes(traits_or_throw(vdt, "matmul_q_group"), K, "matmul_q_group");
    if (!isa_available(isa))
        throw std::invalid_argument(std::string("matmul_q_group: ISA level ") + isa_name(isa) + " is not available");
    for (int j0 = 0; j0 < n_jobs; j0 += kMaxJobs) {
        TileJob tj[kMaxJobs];
        const int n = std::min(kMaxJobs, n_jobs - j0);
        const kern::KernelSet* ks = nullptr;
        for (int j = 0; j < n; ++j) {
            const TileMatmul& J = jobs[j0 + j];
            const TypeTraits& wt = traits_or_throw(J.wtype, "matmul_q_group");
            const kern::KernelSet* jks = kern::find_kernels(J.wtype, isa);
            if (J.wtype != jobs[0].wtype || !jks || bseq_level(J.wtype, isa) != Isa::Scalar)
                throw std::invalid_argument("matmul_q_group: the weights must be of one type that runs tile kernels");
            if (J.N <= 0 || J.ldy < J.N) throw std::invalid_argument("matmul_q_group: bad N or ldy");
            tj[j] = {(const uint8_t*)J.W, row_bytes(wt, K, "matmul_q_group"), J.N, J.Y, J.ldy, J.bias};
            ks = jks;
        }
        matmul_tile_jobs(pool, *ks, tj, n, K, (const uint8_t*)Xq, xrb, M);
    }
}

void matmul(ThreadPool& pool, GGMLType wtype, const void* W, int64_t N, int64_t K,
            const float* X, int64_t M, float* Y, Isa isa) {
    const TypeTraits& wt = traits_or_throw(wtype, "matmul");
    const GGMLType vdt = wt.vec_dot_type;
    if (vdt == GGMLType::F32) {   // f32 activations are used as they are
        matmul_q(pool, wtype, W, N, K, X, M, Y, N, isa);
        return;
    }
    // Scratch reused across calls of this thread (decode calls matmul hundreds of times a token).
    thread_local std::vector<uint8_t> scratch;
    const size_t need = act_buffer_bytes(vdt, M, K);
    if (scratch.size() < need) scratch.resize(need);
    quantize_activations(pool, vdt, X, M, K, scratch.data(), isa);
    matmul_q(pool, wtype, W, N, K, scratch.data(), M, Y, N, isa);
}

}  // namespace lll
