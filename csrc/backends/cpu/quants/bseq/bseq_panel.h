// bseq_panel.h — a packed panel of 16 weight rows (see bseq_avx512.cpp), shared by the VNNI
// and AMX kernels of the block-sequential matmul. Private to csrc/backends/cpu/quants/bseq.
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <new>
#include "backends/cpu/quants/bseq/bseq.h"

namespace lll {
namespace bseq {

// Per 32-element unit u (nu units; a scale group g is one unit for legacy types, 8 for K-quants):
struct Panel {
    uint8_t* q;       // [nu][8][64]  k-group kg, lane n, 4 unsigned quants
    float* d;         // [ng][16]     weight scale of group g, row n
    float* m;         // [nu][16]     legacy min m_w (Q4_1/Q5_1), or [ng][16] dmin (Q4_K/Q5_K)
    int32_t* sc;      // [nu][2][16]  sub-block scales: Q4_K/Q5_K [0]; Q6_K both 16-halves
    int32_t* pair;    // [nu][16]     int16 pair for vpdpwssd: (min, min) Q4_K/Q5_K; (sc0, sc1) Q6_K
    int8_t* qs;       // [nu][8][64]  Q4_0/Q5_0/Q8_0 for AMX: the quants minus their offset, signed
};

// The offset of the unsigned quants of Q4_0 / Q5_0 / Q8_0 in P.q (the bias terms of bseq.h);
// 0 for the other types. AMX multiplies signed by signed (TDPBSSD) with q - offset, so its unit
// sums need no bias subtraction: one float-side operation fewer per output and unit.
inline int signed_offset(GGMLType t) {
    switch (t) {
        case GGMLType::Q4_0: return 8;
        case GGMLType::Q5_0: return 16;
        case GGMLType::Q8_0: return 128;
        default: return 0;
    }
}

// Grows, never shrinks; one per thread.
class PanelBuffer {
public:
    ~PanelBuffer() { free(mem_); }
    Panel get(int64_t nu) {
        const size_t need = (size_t)nu * (512 + 64 + 64 + 128 + 64 + 512);
        if (need > cap_) {
            free(mem_);
            mem_ = aligned_alloc(64, need);
            if (!mem_) throw std::bad_alloc();
            cap_ = need;
        }
        uint8_t* p = (uint8_t*)mem_;
        Panel P;
        P.q = p;                          p += nu * 512;
        P.d = (float*)p;                  p += nu * 64;
        P.m = (float*)p;                  p += nu * 64;
        P.sc = (int32_t*)p;               p += nu * 128;
        P.pair = (int32_t*)p;             p += nu * 64;
        P.qs = (int8_t*)p;
        return P;
    }
private:
    void* mem_ = nullptr;
    size_t cap_ = 0;
};

// Whether AMX beats the VNNI pair kernels on a block of `rows` activation rows of type t.
bool amx_pays(GGMLType t, int64_t rows);

// AMX: activation rows [m, me) in multiples of 16 against one packed panel's signed quants P.qs
// (Q4_0 / Q5_0 / Q8_0; callers ask amx_pays first); returns the first row not done (m itself
// when AMX is not compiled in or not available).
int64_t amx_rows(GGMLType t, const Panel& P, int64_t nu, const ActPack& a, int64_t m, int64_t me,
                 float* y, int64_t ldy, uint16_t lanes);

// Whether AMX tiles read straight from the repacked panels (amx_q8_0_repacked) take a batch of
// `rows` activation rows of type t; the panel kernels run the rest.
bool amx_reads_repacked(GGMLType t, int64_t rows);

// AMX: all activation rows (a.M >= 16) against weight rows [n0, n1) of a repacked Q8_0 weight,
// read as tiles straight from the repacked panels; returns a.M, or 0 when AMX is not compiled in
// or not available (nothing done).
int64_t amx_q8_0_repacked(const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                          float* Y, int64_t ldy);

// Activation rows [m, a.M) (1 to kReplayRows of them) against weight rows [n0, n1) of a repacked
// weight, each panel unpacked straight into the VNNI fold (nothing stored): decode steps of up
// to 16 sequences, speculative drafts, and the rows past amx_q8_0_repacked's blocks of 16.
// Measured against unpacking each panel pair once for the pair kernels (2 threads,
// 4864 x 1024 of every type at 4 / 6 / 8 rows): 5-45% faster. At 9-16 rows the fold of 16 rows
// is unrolled in registers (Sapphire Rapids class, 1 thread, 16 rows of 4864 x 896 /
// 1024): Q4_0 / Q4_1 / Q5_1 +10-20%, Q5_0 +7% (896 x 4864), Q4_K +0-6%, Q5_K even, Q6_K 7-12%
// slower, so Q6_K keeps the pair kernels from 9 rows on (replay_rows_max).
constexpr int64_t kReplayRows = 16;
inline int64_t replay_rows_max(GGMLType t) { return t == GGMLType::Q6_K ? 8 : kReplayRows; }
void replay_panels(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1, const ActPack& a,
                   int64_t m, float* Y, int64_t ldy);

// Activation rows [0, a.M) (a few: decode) against weight rows [n0, n1), straight from the
// GGUF layout (bseq_decode.cpp); bit-identical to the panel kernels.
void matmul_direct(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t n0, int64_t n1,
                   const ActPack& a, float* Y, int64_t ldy);

}  // namespace bseq
}  // namespace lll
