// threadpool.h — a persistent pool of worker threads for data-parallel kernels.
#pragma once
#include <stdint.h>
#include <functional>

namespace lll {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);   // n_threads >= 1 (the caller's thread is one of them)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;
    int size() const;
    // Calls fn(ith, nth) once on each of the nth = size() threads (ith = 0 on the caller) and
    // returns when all have finished. Not re-entrant.
    void run(const std::function<void(int ith, int nth)>& fn);
private:
    void stop_and_join();
    struct Impl;
    Impl* impl_;
};

}  // namespace lll
