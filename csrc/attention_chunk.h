// attention_chunk.h — what the SIMD chunk kernels (attention_avx2.cpp, attention_avx512.cpp)
// share: their scratch, the cache rows of a 16-key tile, which rows see a tile, and the grouping
// of pass 3 (rows with the same key range in a tile go to the PV kernel together). Only the
// vector code differs between them.
#pragma once
#include <algorithm>
#include <vector>
#include "attention.h"
#include "fp16.h"

namespace lll {
namespace attn_detail {

// Per-thread scratch, grown as needed and reused across calls (no allocation in steady state).
struct ChunkScratch {
    std::vector<float> qh;               // [R][hd]   queries rounded to F16
    std::vector<float> s;                // [R][span] scores -> exps -> probabilities
    std::vector<float> kt;               // [tiles][hd][16] K tiles, transposed, f32
    std::vector<float> vt;               // [16][hd]  V tile, f32
    std::vector<int32_t> start, pos;     // [R]       visible key range of each row
    std::vector<fp16_t> zeros;           // [hd]      stands in for keys outside the chunk's range
};

template <typename T>
inline void grow(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
}

// F16 rows of the 16 positions p0..p0+15 of a tile (K or V of kv head offset `off`); positions
// outside [valid_lo, valid_hi] (not this chunk's keys) point at zeros and are masked later.
inline void tile_rows(const KVCache& kv, bool values, int layer, const int32_t* table, int32_t p0, int32_t valid_lo,
                      int32_t valid_hi, int off, const fp16_t* zeros, const fp16_t* rows[kTile]) {
    const int bs = kv.block_size();
    const int64_t w = kv.kv_width();
    const bool one_block = bs % kTile == 0 && p0 >= valid_lo && p0 + kTile - 1 <= valid_hi;
    if (one_block) {   // the whole tile lies in one cache block: consecutive slots
        const int32_t blk = table[p0 / bs];
        const fp16_t* base = (values ? kv.v_slot(layer, blk, p0 % bs) : kv.k_slot(layer, blk, p0 % bs)) + off;
        for (int j = 0; j < kTile; ++j) rows[j] = base + j * w;
        return;
    }
    for (int j = 0; j < kTile; ++j) {
        const int32_t p = p0 + j;
        if (p < valid_lo || p > valid_hi) {
            rows[j] = zeros;
            continue;
        }
        const int32_t blk = table[p / bs];
        rows[j] = (values ? kv.v_slot(layer, blk, p % bs) : kv.k_slot(layer, blk, p % bs)) + off;
    }
}

// Advances [ra, rb) to the rows that see keys p0 .. p0 + n_keys - 1 (rows are ordered by
// position, so they are a range).
inline void rows_seeing(const ChunkScratch& w, int R, int32_t p0, int n_keys, int& ra, int& rb) {
    while (ra < R && w.pos[ra] < p0) ++ra;
    while (rb < R && w.start[rb] <= p0 + n_keys - 1) ++rb;
}

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

}  // namespace attn_detail
}  // namespace lll
