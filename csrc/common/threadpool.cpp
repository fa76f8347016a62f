// threadpool.cpp — persistent workers with a spin-then-sleep wait.
//
// Decode calls run() a few hundred times per token with ~10-100 us of work each, so the hand-off
// must cost well under a microsecond when workers are awake: the caller publishes the job by
// bumping an epoch counter that workers spin on, and waits for a countdown of finished workers.
// A worker that has seen no job for a while (kSpinIters polls) goes to sleep on a condition
// variable, so an idle pool costs no CPU; the caller only touches the mutex when someone sleeps.
//
// Each share ith of a job is claimed once, by worker ith or — when that worker has not started it
// by the time the caller is done with its own share — by the caller. On a machine with more
// runnable threads than cores a descheduled worker then costs nothing instead of a time slice.
// fn(ith, nth) is still called exactly once per ith; ith names the share, not the OS thread.
#include "common/threadpool.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LLL_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define LLL_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define LLL_CPU_RELAX() ((void)0)
#endif

namespace lll {

namespace {
// ~50-100 us of polling with pause (pause is ~40-140 cycles on recent Intel cores): long enough
// to cover the gap between consecutive kernels of one token, short enough not to burn a core.
constexpr int kSpinIters = 2000;
// More threads than any machine has cores: a request beyond it is a mistake, refused before the
// per-thread state is allocated.
constexpr int kMaxThreads = 4096;
}  // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;
    const std::function<void(int, int)>* job = nullptr;   // valid while a run() is in flight
    std::atomic<uint64_t> epoch{0};      // bumped once per run(); workers run each epoch once
    std::atomic<int> pending{0};         // workers that have not finished the current epoch
    std::atomic<int> sleepers{0};        // workers blocked (or about to block) on `wake`
    std::atomic<bool> stop{false};
    std::unique_ptr<std::atomic<int>[]> taken;   // taken[ith]: share ith claimed in this run
    std::mutex mu;
    std::condition_variable wake;
    std::mutex err_mu;
    std::exception_ptr error;            // first exception thrown by a worker in this run

    void record_error(std::exception_ptr e) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!error) error = e;
    }

    // Waits until the epoch moves past `seen` (or stop); returns the new epoch.
    uint64_t wait_for_epoch(uint64_t seen) {
        for (int i = 0; i < kSpinIters; ++i) {
            const uint64_t e = epoch.load(std::memory_order_acquire);
            if (e != seen || stop.load(std::memory_order_relaxed)) return e;
            LLL_CPU_RELAX();
        }
        // Sleep. The sleeper count is raised before re-checking the epoch (seq_cst on both
        // sides), so either run() sees a sleeper and notifies, or we see the new epoch.
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        std::unique_lock<std::mutex> lock(mu);
        wake.wait(lock, [&] {
            return epoch.load(std::memory_order_seq_cst) != seen || stop.load(std::memory_order_seq_cst);
        });
        sleepers.fetch_sub(1, std::memory_order_relaxed);
        return epoch.load(std::memory_order_acquire);
    }

    // Runs share ith of the current job if nobody has claimed it yet.
    void try_share(int ith) {
        if (taken[ith].exchange(1, std::memory_order_acq_rel) != 0) return;
        try {
            (*job)(ith, n_threads);
        } catch (...) {
            record_error(std::current_exception());
        }
        pending.fetch_sub(1, std::memory_order_acq_rel);
    }

    void worker_main(int ith) {
        uint64_t seen = 0;
        for (;;) {
            seen = wait_for_epoch(seen);
            if (stop.load(std::memory_order_acquire)) return;
            try_share(ith);
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
    if (n_threads < 1 || n_threads > kMaxThreads) {
        delete impl_;
        throw std::invalid_argument("ThreadPool: n_threads must be in 1.." + std::to_string(kMaxThreads) +
                                    ", got " + std::to_string(n_threads));
    }
    impl_->n_threads = n_threads;
    impl_->taken.reset(new std::atomic<int>[n_threads]);
    for (int i = 0; i < n_threads; ++i) impl_->taken[i].store(1);
    impl_->workers.reserve(n_threads - 1);
    for (int i = 1; i < n_threads; ++i) {
        try {
            impl_->workers.emplace_back([this, i] { impl_->worker_main(i); });
        } catch (const std::system_error& e) {
            // The OS refused a thread (limits on threads, processes or address space): the ones
            // already running are stopped and joined, so nothing outlives the failed pool.
            stop_and_join();
            delete impl_;
            throw std::runtime_error("ThreadPool: could not start thread " + std::to_string(i + 1) + " of " +
                                     std::to_string(n_threads) + " (" + e.what() +
                                     "); use fewer threads");
        }
    }
}

void ThreadPool::stop_and_join() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->stop.store(true, std::memory_order_seq_cst);
    }
    impl_->wake.notify_all();
    for (auto& t : impl_->workers) t.join();
}

ThreadPool::~ThreadPool() {
    stop_and_join();
    delete impl_;
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::run(const std::function<void(int ith, int nth)>& fn) {
    Impl& p = *impl_;
    if (p.n_threads == 1) {
        fn(0, 1);
        return;
    }
    p.job = &fn;
    p.error = nullptr;
    p.pending.store(p.n_threads - 1, std::memory_order_relaxed);
    for (int i = 1; i < p.n_threads; ++i) p.taken[i].store(0, std::memory_order_release);
    p.epoch.fetch_add(1, std::memory_order_seq_cst);     // publishes job, pending and shares
    if (p.sleepers.load(std::memory_order_seq_cst) > 0) {
        // Taking the mutex orders this notify after any sleeper's predicate check.
        { std::lock_guard<std::mutex> lock(p.mu); }
        p.wake.notify_all();
    }
    std::exception_ptr caller_error;
    try {
        fn(0, p.n_threads);
    } catch (...) {
        caller_error = std::current_exception();
    }
    for (int i = 1; i < p.n_threads; ++i) p.try_share(i);   // shares no worker has started
    // A worker may be descheduled on a busy machine: after a while yield instead of spinning.
    for (int spins = 0; p.pending.load(std::memory_order_acquire) != 0; ++spins) {
        if (spins < kSpinIters) LLL_CPU_RELAX();
        else std::this_thread::yield();
    }
    p.job = nullptr;
    if (caller_error) std::rethrow_exception(caller_error);
    if (p.error) std::rethrow_exception(p.error);
}

}  // namespace lll
