// bind_measure.cpp — two yardsticks for benchmarks/matvec.py and machine.py: streaming read
// bandwidth on the kernels' thread pool, and the pool's dispatch latency.
#include "bindings/harness/harness.h"

#include <time.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/quants/dot/dot_impl.h"

namespace py = pybind11;
using lll::GGMLType;
using lll::Isa;
using namespace lll::harness;

namespace {

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

}  // namespace

void register_measure_harness(py::module_& m) {
    m.def("read_bandwidth", &read_bandwidth_py, py::arg("nbytes"), py::arg("n_threads") = 2, py::arg("reps") = 3,
          py::arg("cpu_clock") = false,
          "Streaming read bandwidth in GB/s (best of reps) over an nbytes buffer with n_threads threads; "
          "cpu_clock: per-thread CPU time instead of wall time.");
    m.def("threadpool_dispatch_ns", &dispatch_latency_ns_py, py::arg("n_threads") = 2, py::arg("iters") = 2000,
          py::arg("work_ns") = 0.0,
          "Mean overhead in ns of ThreadPool::run (wall time minus work_ns) when each share busy-waits work_ns; raises if a run skips, repeats or has not finished a share when it returns.");
}
