// attention.cu — the paged KV cache on the GPU: KV writes and block copies through the block
// tables the CPU shares, and causal (optionally sliding-window) attention reading K/V (F16)
// through them. Decode batches (one query token per sequence) take one block per (token, head);
// prompt chunks take a tiled flash-attention kernel: 16 query tokens of a head share each tile of
// 32 keys in shared memory, with an online softmax. As on the CPU, q is rounded to F16 for q.k.
#include <math.h>
#include <cuda_fp16.h>
#include "common.cuh"
#include "common/fp16.h"

namespace lll {
namespace cuda {

constexpr int kMaxHeadDim = 256;
constexpr int kMaxPerLane = kMaxHeadDim / 32;   // head dims a lane owns
constexpr int kAttnWarps = 4;
constexpr int kKeyTile = 32;                     // keys per shared tile (one per lane)
constexpr int kQTile = LLC_ATTN_TILE_TOKENS;     // query tokens per prompt block
constexpr int kRowsPerWarp = kQTile / kAttnWarps;

struct AttnArgs {
    llc_kv_layer kv;
    llc_batch b;
    int n_head, group, head_dim;
    float scale;
    int window;
    float softcap;   // 0 = none
};

// Gemma 2's soft-capping, as csrc/backends/cpu/attention.h softcap_score.
__device__ __forceinline__ float softcap_score(float s, float cap) {
    return cap > 0.0f ? tanhf(s * (1.0f / cap)) * cap : s;
}

__device__ __forceinline__ int32_t first_visible(int32_t pos, int window) {
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// Offset (in F16 values) of key position p of a sequence's table in the layer's K or V, or -1
// when its block id is not a block of this cache.
__device__ __forceinline__ int64_t slot_offset(const AttnArgs& a, const int32_t* table, int32_t p) {
    const int32_t blk = table[p / a.kv.block_size];
    if (blk < 0 || blk >= a.kv.n_blocks) return -1;
    return ((int64_t)blk * a.kv.block_size + p % a.kv.block_size) * a.kv.kv_width;
}

// One block per (token, kv-width column group): k and v rounded to F16 into the token's slot.
__global__ void k_kv_write(llc_kv_layer kv, const float* k, const float* v, llc_batch b) {
    const int64_t t = blockIdx.y;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= kv.kv_width) return;
    const int32_t pos = b.positions[t];
    const int32_t* table = b.block_tables + (int64_t)b.seq_of_token[t] * b.max_blocks;
    const int32_t blk = table[pos / kv.block_size];
    if (blk < 0 || blk >= kv.n_blocks) return;
    const int64_t slot = ((int64_t)blk * kv.block_size + pos % kv.block_size) * kv.kv_width;
    kv.k[slot + i] = f32_to_fp16(k[t * kv.kv_width + i]);
    kv.v[slot + i] = f32_to_fp16(v[t * kv.kv_width + i]);
}

// Decode: one block of 4 warps per (token, head); warp w takes keys start + w, start + w + 4, ...
// with its own running max, sum and output; the warps are merged at the end.
__global__ void __launch_bounds__(32 * kAttnWarps) k_attn_decode(AttnArgs a, const float* q, float* out) {
    __shared__ float part_m[kAttnWarps], part_l[kAttnWarps];
    __shared__ float part_o[kAttnWarps][kMaxHeadDim];
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int hd = a.head_dim, per_lane = hd / 32;
    const int32_t pos = a.b.positions[t];
    const int32_t* table = a.b.block_tables + (int64_t)a.b.seq_of_token[t] * a.b.max_blocks;
    const int64_t kv_off = (int64_t)(h / a.group) * hd;
    const float* qr = q + (t * a.n_head + h) * (int64_t)hd;
    float qv[kMaxPerLane], o[kMaxPerLane];
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
        qv[i] = i < per_lane ? fp16_to_f32(f32_to_fp16(qr[lane + 32 * i])) : 0.0f;
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int32_t p = first_visible(pos, a.window) + warp; p <= pos; p += kAttnWarps) {
        const int64_t slot = slot_offset(a, table, p);
        if (slot < 0) continue;
        const __half* kr = reinterpret_cast<const __half*>(a.kv.k) + slot + kv_off;
        const __half* vr = reinterpret_cast<const __half*>(a.kv.v) + slot + kv_off;
        float sc = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i)
            if (i < per_lane) sc += qv[i] * __half2float(kr[lane + 32 * i]);
        sc = softcap_score(warp_sum(sc) * a.scale, a.softcap);
        const float m_new = fmaxf(m, sc);
        const float alpha = expf(m - m_new), pe = expf(sc - m_new);
        l = l * alpha + pe;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i)
            if (i < per_lane) o[i] = o[i] * alpha + pe * __half2float(vr[lane + 32 * i]);
        m = m_new;
    }
    if (lane == 0) part_m[warp] = m, part_l[warp] = l;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i)
        if (i < per_lane) part_o[warp][lane + 32 * i] = o[i];
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, part_m[w]);
    float total = 0.0f, weight[kAttnWarps];
    for (int w = 0; w < kAttnWarps; ++w) {
        weight[w] = part_m[w] == -INFINITY ? 0.0f : expf(part_m[w] - mx);
        total += part_l[w] * weight[w];
    }
    float* orow = out + (t * a.n_head + h) * (int64_t)hd;
    for (int d = threadIdx.x; d < hd; d += 32 * kAttnWarps) {
        float acc = 0.0f;
        for (int w = 0; w < kAttnWarps; ++w) acc += part_o[w][d] * weight[w];
        orow[d] = total > 0.0f ? acc / total : 0.0f;
    }
}

// Prompt: one block of 4 warps per (tile of up to 16 query tokens of one sequence, head). Each
// tile of 32 keys (K and V, F16) is loaded once into shared memory; lane j scores key j for each
// of the warp's 4 query rows, then every lane adds the 32 keys' V to the dims it owns.
__global__ void __launch_bounds__(32 * kAttnWarps) k_attn_prompt(AttnArgs a, const float* q, float* out) {
    constexpr int kRow = kMaxHeadDim + 2;        // padded row: consecutive keys hit other banks
    __shared__ __half ks[kKeyTile][kRow], vs[kKeyTile][kRow];
    __shared__ __half qs[kQTile][kMaxHeadDim];
    const int t0 = a.b.tiles[2 * blockIdx.x], t1 = a.b.tiles[2 * blockIdx.x + 1];
    const int h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int hd = a.head_dim, per_lane = hd / 32;
    const int32_t* table = a.b.block_tables + (int64_t)a.b.seq_of_token[t0] * a.b.max_blocks;
    const int64_t kv_off = (int64_t)(h / a.group) * hd;
    for (int e = threadIdx.x; e < kQTile * hd; e += 32 * kAttnWarps) {
        const int r = e / hd, d = e % hd;
        qs[r][d] = t0 + r < t1 ? __float2half_rn(q[((t0 + r) * (int64_t)a.n_head + h) * hd + d]) : __float2half_rn(0.0f);
    }
    int32_t pos[kRowsPerWarp], first[kRowsPerWarp];
    float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kMaxPerLane];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int t = t0 + warp * kRowsPerWarp + r;
        pos[r] = t < t1 ? a.b.positions[t] : -1;   // -1: no row, sees no key
        first[r] = first_visible(pos[r], a.window);
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) o[r][i] = 0.0f;
    }
    const int32_t k_begin = first_visible(a.b.positions[t0], a.window), k_end = a.b.positions[t1 - 1];
    for (int32_t kt = k_begin; kt <= k_end; kt += kKeyTile) {
        __syncthreads();                          // the previous tile is consumed (and qs written)
        for (int e = threadIdx.x; e < kKeyTile * hd; e += 32 * kAttnWarps) {
            const int j = e / hd, d = e % hd;
            const int64_t slot = kt + j <= k_end ? slot_offset(a, table, kt + j) : -1;
            const __half zero = __float2half_rn(0.0f);
            ks[j][d] = slot < 0 ? zero : reinterpret_cast<const __half*>(a.kv.k)[slot + kv_off + d];
            vs[j][d] = slot < 0 ? zero : reinterpret_cast<const __half*>(a.kv.v)[slot + kv_off + d];
        }
        __syncthreads();
        const int32_t p = kt + lane;
        const bool key_ok = p <= k_end && slot_offset(a, table, p) >= 0;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const bool valid = key_ok && p >= first[r] && p <= pos[r];
            const int row = warp * kRowsPerWarp + r;
            float sc = -INFINITY;
            if (valid) {
                float acc = 0.0f;
                for (int d = 0; d < hd; d += 2) {
                    const float2 qd = __half22float2(*reinterpret_cast<const __half2*>(&qs[row][d]));
                    const float2 kd = __half22float2(*reinterpret_cast<const __half2*>(&ks[lane][d]));
                    acc = fmaf(qd.x, kd.x, acc);
                    acc = fmaf(qd.y, kd.y, acc);
                }
                sc = softcap_score(acc * a.scale, a.softcap);
            }
            const float m_new = fmaxf(m[r], warp_max(sc));
            if (m_new == -INFINITY) continue;     // no key of this row in the tile or before it
            const float alpha = expf(m[r] - m_new);
            const float pe = valid ? expf(sc - m_new) : 0.0f;
            l[r] = l[r] * alpha + warp_sum(pe);
#pragma unroll
            for (int i = 0; i < kMaxPerLane; ++i) o[r][i] *= alpha;
            for (int j = 0; j < kKeyTile; ++j) {
                const float pj = __shfl_sync(0xffffffffu, pe, j);
                if (pj == 0.0f) continue;
#pragma unroll
                for (int i = 0; i < kMaxPerLane; ++i)
                    if (i < per_lane) o[r][i] = fmaf(pj, __half2float(vs[j][lane + 32 * i]), o[r][i]);
            }
            m[r] = m_new;
        }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int t = t0 + warp * kRowsPerWarp + r;
        if (t >= t1) continue;
        float* orow = out + ((int64_t)t * a.n_head + h) * hd;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i)
            if (i < per_lane) orow[lane + 32 * i] = l[r] > 0.0f ? o[r][i] / l[r] : 0.0f;
    }
}

}  // namespace cuda
}  // namespace lll

using namespace lll::cuda;

extern "C" {

int64_t llc_attention_tiles(const int32_t* seq_of_token, int64_t T, int32_t* tiles, int32_t* max_tile_tokens) {
    int64_t n = 0;
    int32_t longest = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && t1 - t0 < kQTile && seq_of_token[t1] == seq_of_token[t0]) ++t1;
        tiles[2 * n] = (int32_t)t0, tiles[2 * n + 1] = (int32_t)t1;
        longest = t1 - t0 > longest ? (int32_t)(t1 - t0) : longest;
        ++n;
        t0 = t1;
    }
    if (max_tile_tokens) *max_tile_tokens = longest;
    return n;
}

llc_status llc_kv_write(llc_kv_layer kv, const float* k, const float* v, const llc_batch* b, llc_stream s) {
    LLC_REQUIRE(b && kv.k && kv.v && kv.block_size > 0 && kv.kv_width > 0, "kv_write: bad cache or batch");
    LLC_REQUIRE(b->n_tokens >= 0 && b->n_tokens <= 65535, "kv_write: at most 65535 tokens per call");
    if (b->n_tokens == 0) return LLC_OK;
    const dim3 grid(blocks_for(kv.kv_width, 128), (unsigned)b->n_tokens);
    k_kv_write<<<grid, 128, 0, s>>>(kv, k, v, *b);
    return launched("kv_write");
}

llc_status llc_kv_copy_block(llc_kv_layer kv, int64_t src, int64_t dst, llc_stream s) {
    LLC_REQUIRE(src >= 0 && src < kv.n_blocks && dst >= 0 && dst < kv.n_blocks,
                "kv_copy_block: block " + std::to_string(src) + " -> " + std::to_string(dst) + " outside [0, " +
                    std::to_string(kv.n_blocks) + ")");
    const size_t block = (size_t)kv.block_size * kv.kv_width;
    if (llc_status st = llc_memcpy_d2d(kv.k + dst * block, kv.k + src * block, block * 2, s)) return st;
    return llc_memcpy_d2d(kv.v + dst * block, kv.v + src * block, block * 2, s);
}

llc_status llc_attention(llc_kv_layer kv, const float* q, float* out, const llc_batch* b, int n_head, int n_head_kv,
                         int head_dim, float scale, int window, float softcap, llc_stream s) {
    LLC_REQUIRE(b, "attention: no batch");
    LLC_REQUIRE(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
                "attention: n_head " + std::to_string(n_head) + " is not a positive multiple of n_head_kv " +
                    std::to_string(n_head_kv));
    LLC_REQUIRE(head_dim > 0 && head_dim % 32 == 0 && head_dim <= kMaxHeadDim,
                "attention: head_dim " + std::to_string(head_dim) + " must be a multiple of 32 up to 256");
    LLC_REQUIRE((int64_t)n_head_kv * head_dim == kv.kv_width, "attention: n_head_kv * head_dim does not match the "
                                                              "cache's kv_width " + std::to_string(kv.kv_width));
    LLC_REQUIRE(window >= 0, "attention: window must be >= 0");
    LLC_REQUIRE(n_head <= 65535 && b->n_tokens <= 0x7fffffff, "attention: too many heads or tokens");
    if (b->n_tokens == 0) return LLC_OK;
    LLC_REQUIRE(softcap >= 0.0f, "attention: softcap must be >= 0");
    const AttnArgs args{kv, *b, n_head, n_head / n_head_kv, head_dim, scale, window, softcap};
    if (b->max_tile_tokens <= 1) {
        k_attn_decode<<<dim3((unsigned)b->n_tokens, n_head), 32 * kAttnWarps, 0, s>>>(args, q, out);
        return launched("attention (decode)");
    }
    LLC_REQUIRE(b->tiles && b->n_tiles > 0 && b->max_tile_tokens <= kQTile,
                "attention: a prompt batch needs its tiles (llc_attention_tiles)");
    k_attn_prompt<<<dim3((unsigned)b->n_tiles, n_head), 32 * kAttnWarps, 0, s>>>(args, q, out);
    return launched("attention (prompt)");
}

}  // extern "C"
