// int8_peak.cpp — the machine's int8 dot-product ceiling: register-only vpdpbusd on 512-bit (and
// 256-bit) vectors, 12 independent accumulators per thread (enough to hide the instruction's
// latency), one thread per core. The prompt kernels' GOP/s (benchmarks/matvec.py) are quoted as a
// fraction of this figure in docs/performance.md. Ops count a multiply and an add apart, as
// matvec.py's 2*M*N*K does.
//
//     g++ -O3 -march=native -std=c++17 -pthread benchmarks/int8_peak.cpp -o /tmp/int8_peak && /tmp/int8_peak [threads]
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__)
#error "int8_peak needs AVX-512 VNNI (build with -march=native on such a CPU)"
#endif

namespace {

template <class V, V (*Dp)(V, V, V), V (*Add)(V, V)>
int64_t chains(V a, V b, V* c, int64_t iters) {
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) c[i] = Dp(c[i], a, b);
        __asm__ volatile("" : "+v"(a));   // keeps the compiler from folding the loop
    }
    V s = c[0];
    for (int i = 1; i < 12; ++i) s = Add(s, c[i]);
    int32_t out[sizeof(V) / 4];
    __builtin_memcpy(out, &s, sizeof(V));
    return out[0];
}

__m512i dp512(__m512i c, __m512i a, __m512i b) { return _mm512_dpbusd_epi32(c, a, b); }
__m512i add512(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
__m256i dp256(__m256i c, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(c, a, b); }
__m256i add256(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }

double gops(int width, int threads, int64_t iters) {
    std::vector<std::thread> pool;
    volatile int64_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            if (width == 512) {
                __m512i c[12];
                for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_epi32(i + t);
                sink = sink + chains<__m512i, dp512, add512>(_mm512_set1_epi8(1), _mm512_set1_epi8(2), c, iters);
            } else {
                __m256i c[12];
                for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_epi32(i + t);
                sink = sink + chains<__m256i, dp256, add256>(_mm256_set1_epi8(1), _mm256_set1_epi8(2), c, iters);
            }
        });
    for (auto& th : pool) th.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return (double)threads * iters * 12 * (width / 8) * 2 / secs / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    const int max_threads = argc > 1 ? std::atoi(argv[1]) : (int)std::thread::hardware_concurrency();
    for (int threads = 1; threads <= max_threads; threads *= 2)
        for (int width : {256, 512}) {
            double best = 0;
            for (int rep = 0; rep < 3; ++rep) best = std::max(best, gops(width, threads, 100000000));
            std::printf("threads %d, %d-bit vpdpbusd: %.0f G int8 ops/s (best of 3)\n", threads, width, best);
        }
}
