// attention_chunk.h — the SIMD chunk kernel's three passes (attend_chunk below), shared by
// attention_avx2.cpp and attention_avx512.cpp, which supply only their vector code (a struct of
// static functions, `Vec`). One chunk = rows (token, query head) of one sequence and one kv
// head, R = tokens * group; its keys span tiles of 16 positions aligned to multiples of 16:
//   1. K tiles -> f32 transposed kt[d][16]; scores of 16 keys are 16 lanes, one sequential FMA
//      chain over d per lane; keys outside a row's range -> -inf (then the optional soft-cap).
//   2. per row: max, exp, double sum in 16 lanes (lane = key position % 16), probabilities
//      rounded to F16.
//   3. V tile -> f32 vt[16][d] (chunks of a few rows read the F16 rows in place instead); per
//      row, out[d] += p_j * v_j[d] over its keys in order.
// A quantized cache (Q8_0 / Q4_0 K or V) has its tiles dequantized to f32 by the cache instead
// of converted from F16 by Vec: the same exact values reach the same float operations.
// Scalar reference: attend_row_scalar in attention.cpp (the same float operations per row).
#pragma once
#include <algorithm>
#include <new>
#include <type_traits>
#include <vector>
#include "backends/cpu/attention.h"
#include "common/fp16.h"

namespace lll {
namespace attn_detail {

// Allocates on 64-byte boundaries. The tiles are read a 16-float vector at a time: from malloc's
// 16-byte alignment three loads in four straddled two cache lines, and the PV pass (16 V loads
// per 16 FMAs) ran at half the FMA rate on Zen 4.
template <typename T>
struct CacheLineAlloc {
    using value_type = T;
    CacheLineAlloc() = default;
    template <typename U>
    CacheLineAlloc(const CacheLineAlloc<U>&) {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
    template <typename U>
    bool operator==(const CacheLineAlloc<U>&) const { return true; }
    template <typename U>
    bool operator!=(const CacheLineAlloc<U>&) const { return false; }
};
template <typename T>
using LineVector = std::vector<T, CacheLineAlloc<T>>;

// Per-thread scratch, grown as needed and reused across calls (no allocation in steady state).
// On the AVX-512 path head_dim % 16 == 0, so every row of these starts on a cache line too.
struct ChunkScratch {
    LineVector<float> qh;                // [R][hd]   queries rounded to F16
    LineVector<float> s;                 // [R][span] scores -> exps -> probabilities
    LineVector<float> kt;                // [tiles][hd][16] K tiles, transposed, f32
    LineVector<float> vt;                // [16][hd]  V tile, f32
    std::vector<int32_t> start, pos;     // [R]       visible key range of each row
    std::vector<fp16_t> zeros;           // [hd]      stands in for keys outside the chunk's range
    LineVector<float> deq;               // [16][hd]  a quantized cache's tile, dequantized
};

// This thread's scratch. Not inlined: in a shared library every use of a thread_local inside an
// inlined loop may call __tls_get_addr again (setup_rows called it once per 16 query values).
__attribute__((noinline)) inline ChunkScratch& thread_scratch() {
    static thread_local ChunkScratch w;
    return w;
}

template <typename V>
inline void grow(V& v, size_t n) {
    if (v.size() < n) v.resize(n);
}

// F16 rows of the 16 positions p0..p0+15 of a tile (K or V of kv head `head`); positions
// outside [valid_lo, valid_hi] (not this chunk's keys) point at zeros and are masked later.
inline void tile_rows(const KVCache& kv, bool values, int layer, const int32_t* table, int32_t p0, int32_t valid_lo,
                      int32_t valid_hi, int head, const fp16_t* zeros, const fp16_t* rows[kTile]) {
    const int bs = kv.block_size();
    auto row = [&](int32_t p) {
        const int32_t blk = table[p / bs];
        return values ? kv.v_row(layer, blk, p % bs, head) : kv.k_row(layer, blk, p % bs, head);
    };
    const bool one_block = bs % kTile == 0 && p0 >= valid_lo && p0 + kTile - 1 <= valid_hi;
    if (one_block) {   // the whole tile lies in one cache block: consecutive slots
        const fp16_t* base = row(p0);
        const int64_t step = kv.row_step(layer, values);
        for (int j = 0; j < kTile; ++j) rows[j] = base + j * step;
        return;
    }
    for (int j = 0; j < kTile; ++j) {
        const int32_t p = p0 + j;
        rows[j] = p < valid_lo || p > valid_hi ? zeros : row(p);
    }
}

// The 16 rows of a tile of a quantized K or V (see tile_rows) dequantized into dst[16][hd],
// zeros outside [valid_lo, valid_hi].
inline void tile_dequant(const KVCache& kv, bool values, int layer, const int32_t* table, int32_t p0,
                         int32_t valid_lo, int32_t valid_hi, int head, int hd, float* dst) {
    const int bs = kv.block_size();
    for (int j = 0; j < kTile; ++j) {
        const int32_t p = p0 + j;
        if (p < valid_lo || p > valid_hi) std::fill(dst + (size_t)j * hd, dst + (size_t)(j + 1) * hd, 0.0f);
        else kv.read(values, layer, table[p / bs], p % bs, (int64_t)head * hd, hd, dst + (size_t)j * hd);
    }
}

// Asks for the F16 rows of a tile (K or V, see tile_rows) to be brought into the cache. The
// tiles of a sequence lie in blocks the block table scatters, so the hardware prefetcher cannot
// follow them: without this, decode's K pass waited on the loads of every tile (its rows are
// read once per step, from memory, at 2-8 cache lines a row).
inline void prefetch_tile(const KVCache& kv, bool values, int layer, const int32_t* table, int32_t p0, int32_t valid_lo,
                          int32_t valid_hi, int head, int hd) {
    if (values ? kv.types().v != GGMLType::F16 : kv.types().k != GGMLType::F16) return;
    const fp16_t* rows[kTile];
    tile_rows(kv, values, layer, table, p0, valid_lo, valid_hi, head, nullptr, rows);   // nullptr: not a key
    for (const fp16_t* row : rows)
        for (int b = 0; row != nullptr && b < hd * (int)sizeof(fp16_t); b += 64) __builtin_prefetch((const char*)row + b);
}

// K tile t of pass 1 into kt[d][16]: converted by Vec from F16, or dequantized and transposed.
template <class Vec>
inline void load_k(const KVCache& kv, int layer, const int32_t* table, int32_t p0, int32_t first, int32_t last,
                   int head, int hd, ChunkScratch& w, float* kt) {
    if (kv.types().k == GGMLType::F16) {
        const fp16_t* rows[kTile];
        tile_rows(kv, false, layer, table, p0, first, last, head, w.zeros.data(), rows);
        Vec::load_k_tile(rows, hd, kt);
        return;
    }
    tile_dequant(kv, false, layer, table, p0, first, last, head, hd, w.deq.data());
    for (int j = 0; j < kTile; ++j)
        for (int d = 0; d < hd; ++d) kt[(size_t)d * kTile + j] = w.deq[(size_t)j * hd + d];
}

// V tile of pass 3 into vt[16][d].
template <class Vec>
inline void load_v(const KVCache& kv, int layer, const int32_t* table, int32_t p0, int32_t first, int32_t last,
                   int head, int hd, ChunkScratch& w) {
    if (kv.types().v == GGMLType::F16) {
        const fp16_t* rows[kTile];
        tile_rows(kv, true, layer, table, p0, first, last, head, w.zeros.data(), rows);
        Vec::load_v_tile(rows, hd, w.vt.data());
        return;
    }
    tile_dequant(kv, true, layer, table, p0, first, last, head, hd, w.vt.data());
}

// Advances [ra, rb) to the rows that see keys p0 .. p0 + n_keys - 1 (rows are ordered by
// position, so they are a range).
inline void rows_seeing(const ChunkScratch& w, int R, int32_t p0, int n_keys, int& ra, int& rb) {
    while (ra < R && w.pos[ra] < p0) ++ra;
    while (rb < R && w.start[rb] <= p0 + n_keys - 1) ++rb;
}

// Inputs of a score kernel for a run of rows and the tiles starting at p0.
struct ScoreJob {
    const float* kt;       // [tiles][hd][16] transposed K tiles
    int hd;
    float scale;
    int32_t p0;
    const float* qh;       // [n][hd] first row's query
    const int32_t* start;  // [n]
    const int32_t* pos;    // [n]
    float* s;              // first row's scores at tile p0; row stride `stride`
    int64_t stride;
};

// Pass 3 for tile k (keys p0 ..) and its rows [ra, rb): rows with the same key range in the tile
// (all but the diagonal ones) go up to 4 at a time to pv(n, p, ja, jb, out), which adds
// p_r[j] * v_j over the tile's keys ja..jb to each row's output.
template <typename PV>
inline void pv_of_tile(const ChunkScratch& w, const Chunk& c, const Shape& sh, float* out, int k, int32_t p0, int ra,
                       int rb, int64_t span, PV pv) {
    for (int r = ra; r < rb;) {
        const int ja = std::max(w.start[r], p0) - p0, jb = std::min(w.pos[r], p0 + kTile - 1) - p0;
        const float* p[4];
        float* o[4];
        int n = 0;
        for (; n < 4 && r + n < rb; ++n) {
            const int rr = r + n;
            if (std::max(w.start[rr], p0) - p0 != ja || std::min(w.pos[rr], p0 + kTile - 1) - p0 != jb) break;
            const int64_t t = c.t0 + rr / sh.group, h = c.kv_head * sh.group + rr % sh.group;
            p[n] = &w.s[rr * span + k * kTile];
            o[n] = out + (t * sh.n_head + h) * sh.head_dim;
        }
        pv(n, p, ja, jb, o);
        r += n;
    }
}

// Calls pv(std::integral_constant<int, n>) for n = 1..4 rows: unrolled per row count, so the
// accumulators stay in registers.
template <class PV>
inline void with_row_count(int n, PV pv) {
    switch (n) {
        case 4: pv(std::integral_constant<int, 4>{}); break;
        case 3: pv(std::integral_constant<int, 3>{}); break;
        case 2: pv(std::integral_constant<int, 2>{}); break;
        default: pv(std::integral_constant<int, 1>{}); break;
    }
}

// One chunk, with the vector code of Vec:
//   Vec::kScoreTiles                      tiles scored per step of pass 1
//   Vec::setup_rows(q, out, b, c, sh, w)  F16-rounded queries, visible ranges, outputs zeroed
//   Vec::load_k_tile(rows, hd, kt)        kt[d][16] = K[j][d]
//   Vec::score(job, tiles, n)             pass 1 for n rows
//   Vec::softmax_row(s, n_tiles)          pass 2 for one row
//   Vec::load_v_tile(rows, hd, vt)        vt[j][d] = V[j][d]
//   Vec::pv<NR>(vt, hd, p, ja, jb, out)   pass 3 for NR <= 4 rows with the same keys ja..jb
//   Vec::kPvF16Rows                       chunks of up to this many rows take pass 3 from F16
//   Vec::pv_f16<NR>(rows, hd, p, ja, jb, out)  that pass 3 (only when kPvF16Rows > 0)
template <class Vec>
void attend_chunk(const KVCache& kv, int layer, const float* q, float* out, const Batch& b, const Chunk& c,
                  const Shape& sh) {
    ChunkScratch& w = thread_scratch();
    const int hd = sh.head_dim, R = (int)(c.t1 - c.t0) * sh.group, head = c.kv_head;
    const int32_t* table = b.block_tables + (int64_t)b.seq_of_token[c.t0] * b.max_blocks;
    const int32_t first = first_visible(b.positions[c.t0], sh.window), last = b.positions[c.t1 - 1];
    const int32_t lo = first / kTile * kTile;                 // tiles aligned to absolute positions
    const int n_tiles = (last - lo) / kTile + 1;
    const int64_t span = (int64_t)n_tiles * kTile;
    grow(w.qh, (size_t)R * hd), grow(w.s, (size_t)R * span), grow(w.kt, (size_t)Vec::kScoreTiles * hd * kTile);
    grow(w.vt, (size_t)hd * kTile), grow(w.start, R), grow(w.pos, R);
    if ((int)w.zeros.size() < hd) w.zeros.assign(hd, 0);
    if (!kv.is_f16()) grow(w.deq, (size_t)kTile * hd);
    Vec::setup_rows(q, out, b, c, sh, w);

    // Tiles are prefetched kAheadK (K) and kAheadV (V) tiles ahead of their pass; the first ones
    // before the pass starts.
    constexpr int kAheadK = 4, kAheadV = 2;
    for (int t = 0; t < std::min(kAheadK, n_tiles); ++t)
        prefetch_tile(kv, false, layer, table, lo + t * kTile, first, last, head, hd);
    // Pass 1: scores, kScoreTiles tiles at a time, for the union of the rows that see them
    // (lanes a row does not see are -inf, and its softmax only reads its own tiles).
    for (int k = 0, ra = 0, rb = 0; k < n_tiles;) {
        const int nt = std::min(Vec::kScoreTiles, n_tiles - k);
        const int32_t p0 = lo + k * kTile;
        rows_seeing(w, R, p0, nt * kTile, ra, rb);
        if (ra < rb) {
            for (int t = kAheadK; t < kAheadK + nt && k + t < n_tiles; ++t)
                prefetch_tile(kv, false, layer, table, p0 + t * kTile, first, last, head, hd);
            for (int t = 0; t < nt; ++t)
                load_k<Vec>(kv, layer, table, p0 + t * kTile, first, last, head, hd, w, &w.kt[(size_t)t * hd * kTile]);
            Vec::score(ScoreJob{w.kt.data(), hd, sh.scale, p0, &w.qh[(int64_t)ra * hd], &w.start[ra], &w.pos[ra],
                                &w.s[ra * span + k * kTile], span},
                       nt, rb - ra);
        }
        k += nt;
    }
    for (int t = 0; t < std::min(kAheadV, n_tiles); ++t)
        prefetch_tile(kv, true, layer, table, lo + t * kTile, first, last, head, hd);
    if (sh.softcap > 0.0f) softcap_rows(w.s.data(), R, span, lo, w.start.data(), w.pos.data(), sh.softcap);
    // Pass 2: softmax of each row over its own tiles.
    for (int r = 0; r < R; ++r) {
        const int k0 = (w.start[r] / kTile * kTile - lo) / kTile, k1 = (w.pos[r] - lo) / kTile;
        Vec::softmax_row(&w.s[r * span + k0 * kTile], k1 - k0 + 1);
    }
    // Pass 3: probabilities times V.
    const bool f16_rows = Vec::kPvF16Rows > 0 && kv.types().v == GGMLType::F16 && R <= Vec::kPvF16Rows;
    for (int k = 0, ra = 0, rb = 0; k < n_tiles; ++k) {
        const int32_t p0 = lo + k * kTile;
        rows_seeing(w, R, p0, kTile, ra, rb);
        if (ra >= rb) continue;
        if (k + kAheadV < n_tiles) prefetch_tile(kv, true, layer, table, p0 + kAheadV * kTile, first, last, head, hd);
        if constexpr (Vec::kPvF16Rows > 0) {
            if (f16_rows) {
                const fp16_t* rows[kTile];
                tile_rows(kv, true, layer, table, p0, first, last, head, w.zeros.data(), rows);
                pv_of_tile(w, c, sh, out, k, p0, ra, rb, span,
                           [&](int n, const float* const* p, int ja, int jb, float* const* o) {
                               with_row_count(n, [&](auto nr) { Vec::template pv_f16<decltype(nr)::value>(rows, hd, p, ja, jb, o); });
                           });
                continue;
            }
        }
        load_v<Vec>(kv, layer, table, p0, first, last, head, hd, w);
        pv_of_tile(w, c, sh, out, k, p0, ra, rb, span, [&](int n, const float* const* p, int ja, int jb, float* const* o) {
            with_row_count(n, [&](auto nr) { Vec::template pv<decltype(nr)::value>(w.vt.data(), hd, p, ja, jb, o); });
        });
    }
}

}  // namespace attn_detail
}  // namespace lll
