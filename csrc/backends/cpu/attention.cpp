// attention.cpp — KV writes, the scalar reference kernel, validation and the work split (see
// attention.h). The AVX-512 kernel is in attention_avx512.cpp and does the same float operations
// in the same order, so the two are bit-identical. Every fused multiply-add here is an explicit
// std::fma: the compiler must not contract (or not) a*b+c differently from the SIMD path.
#include "backends/cpu/attention.h"
#include <math.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>
#include "common/fp16.h"
#include "backends/cpu/quants/quants.h"

namespace lll {

using attn_detail::Chunk;
using attn_detail::Shape;
using attn_detail::kTile;

void kv_write(KVCache& kv, int layer, const float* k, const float* v, const Batch& b) {
    const int bs = kv.block_size();
    const int64_t w = kv.kv_width();
    for (int64_t t = 0; t < b.n_tokens; ++t) {
        const int32_t pos = b.positions[t];
        const int32_t* table = b.block_tables + (int64_t)b.seq_of_token[t] * b.max_blocks;
        kv.write(layer, table[pos / bs], pos % bs, k + t * w, v + t * w);
    }
}

bool attention_avx2_available() {
#if LLL_ATTN_AVX2
    return isa_available(Isa::AVX2);   // the CPU has AVX2 + FMA + F16C; LOCALLLM_ISA may cap it
#else
    return false;
#endif
}

AttnKernel pick_attention_kernel(AttnKernel asked, bool avx512_fits, bool avx2_fits) {
    if (asked == AttnKernel::AVX512 && !attention_avx512_available())
        throw std::invalid_argument("attention: the AVX-512 kernel is not available on this CPU/build");
    if (asked == AttnKernel::AVX2 && !attention_avx2_available())
        throw std::invalid_argument("attention: the AVX2 kernel is not available on this CPU/build");
    const bool any = asked == AttnKernel::Auto;
    if ((any || asked == AttnKernel::AVX512) && attention_avx512_available() && avx512_fits) return AttnKernel::AVX512;
    if ((any || asked == AttnKernel::AVX2) && attention_avx2_available() && avx2_fits) return AttnKernel::AVX2;
    return AttnKernel::Scalar;
}

bool attention_avx512_available() {
#if LLL_ATTN_AVX512
    return isa_available(Isa::AVX512);   // the CPU has F/DQ and F16C among more; LOCALLLM_ISA may cap it
#else
    return false;
#endif
}

float attention_exp(float x) { return exp_nonpositive(x); }

namespace {

// Per-thread scratch of the scalar kernel, grown as needed and reused across calls.
struct ScalarScratch {
    std::vector<float> qh, p, kf, vf;   // [hd], [keys], [16][hd], [hd]
};

// Scores of keys [start, pos] (one sequential FMA chain over d each, times scale) into p[0..n).
// Keys go 16 at a time so that the 16 independent chains overlap (same operations per key).
void scores_scalar(const KVCache& kv, int layer, const int32_t* table, int32_t start, int32_t pos,
                   int kv_off, int hd, float scale, float softcap, ScalarScratch& s) {
    const int bs = kv.block_size();
    for (int32_t p0 = start; p0 <= pos; p0 += kTile) {
        const int nk = std::min<int32_t>(kTile, pos - p0 + 1);
        for (int j = 0; j < kTile; ++j) {   // keys past pos: zero rows, their scores are dropped
            const int32_t p = p0 + j;
            if (j < nk) kv.read(false, layer, table[p / bs], p % bs, kv_off, hd, &s.kf[(size_t)j * hd]);
            else std::fill(&s.kf[(size_t)j * hd], &s.kf[(size_t)(j + 1) * hd], 0.0f);
        }
        float acc[kTile] = {};
        for (int d = 0; d < hd; ++d)
            for (int j = 0; j < kTile; ++j) acc[j] = std::fma(s.qh[d], s.kf[(size_t)j * hd + d], acc[j]);
        for (int j = 0; j < nk; ++j) s.p[p0 - start + j] = softcap_score(acc[j] * scale, softcap);
    }
}

// One (token, head) row: the reference every other path reproduces bit for bit.
void attend_row_scalar(const KVCache& kv, int layer, const float* q, float* out, const int32_t* table,
                       int32_t pos, const Shape& sh, int kv_off, ScalarScratch& s) {
    const int bs = kv.block_size(), hd = sh.head_dim;
    const int32_t start = attn_detail::first_visible(pos, sh.window);
    const int32_t n = pos - start + 1;
    if ((int32_t)s.p.size() < n) s.p.resize(n);
    if ((int)s.qh.size() < hd) s.qh.resize(hd), s.vf.resize(hd), s.kf.resize((size_t)kTile * hd);
    for (int d = 0; d < hd; ++d) s.qh[d] = fp16_to_f32(f32_to_fp16(q[d]));
    scores_scalar(kv, layer, table, start, pos, kv_off, hd, sh.scale, sh.softcap, s);
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; ++j) mx = std::max(mx, s.p[j]);
    double lanes[kTile] = {};
    for (int32_t j = 0; j < n; ++j) {
        const float e = attention_exp(s.p[j] - mx);
        s.p[j] = e;
        lanes[(start + j) % kTile] += (double)e;
    }
    const float inv = (float)(1.0 / attn_detail::sum_lanes(lanes));
    for (int32_t j = 0; j < n; ++j) s.p[j] = fp16_to_f32(f32_to_fp16(s.p[j] * inv));
    for (int d = 0; d < hd; ++d) out[d] = 0.0f;
    for (int32_t j = 0; j < n; ++j) {
        const int32_t p = start + j;
        kv.read(true, layer, table[p / bs], p % bs, kv_off, hd, s.vf.data());
        const float pj = s.p[j];
        for (int d = 0; d < hd; ++d) out[d] = std::fma(pj, s.vf[d], out[d]);
    }
}

void attend_chunk_scalar(const KVCache& kv, int layer, const float* q, float* out, const Batch& b,
                         const Chunk& c, const Shape& sh) {
    static thread_local ScalarScratch scratch;
    const int32_t* table = b.block_tables + (int64_t)b.seq_of_token[c.t0] * b.max_blocks;
    for (int64_t t = c.t0; t < c.t1; ++t)
        for (int h = c.kv_head * sh.group; h < (c.kv_head + 1) * sh.group; ++h) {
            const int64_t off = (t * sh.n_head + h) * (int64_t)sh.head_dim;
            attend_row_scalar(kv, layer, q + off, out + off, table, b.positions[t], sh,
                              c.kv_head * sh.head_dim, scratch);
        }
}

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("attention: " + what); }

// Shape and batch checks that keep every cache access in bounds (cheap: per token, per block).
void validate(const KVCache& kv, const Batch& b, const Shape& sh) {
    if (sh.n_head <= 0 || sh.n_head_kv <= 0 || sh.n_head % sh.n_head_kv != 0)
        bad("n_head " + std::to_string(sh.n_head) + " is not a positive multiple of n_head_kv " +
            std::to_string(sh.n_head_kv));
    if (sh.head_dim <= 0 || (int64_t)sh.n_head_kv * sh.head_dim != kv.kv_width())
        bad("n_head_kv * head_dim = " + std::to_string((int64_t)sh.n_head_kv * sh.head_dim) +
            " does not match the cache's kv_width " + std::to_string(kv.kv_width()));
    if (sh.window < 0) bad("window must be >= 0, got " + std::to_string(sh.window));
    check_kv_types(kv.types(), sh.head_dim);
    const int bs = kv.block_size();
    int64_t run_start = 0;
    for (int64_t t = 0; t < b.n_tokens; ++t) {
        const int32_t pos = b.positions[t], seq = b.seq_of_token[t];
        if (seq < 0 || seq >= b.n_seqs) bad("token " + std::to_string(t) + " has sequence id out of range");
        if (pos < 0 || pos / bs >= b.max_blocks)
            bad("token " + std::to_string(t) + " has position " + std::to_string(pos) + " beyond its block table");
        const bool last_of_run = t + 1 == b.n_tokens || b.seq_of_token[t + 1] != seq;
        if (!last_of_run) {
            // Equal positions: rows that see the same keys (an encoder's tokens, Model::bidirectional_view).
            if (b.positions[t + 1] < pos) bad("positions of a sequence must not decrease within the batch");
            continue;
        }
        const int32_t* table = b.block_tables + (int64_t)seq * b.max_blocks;
        const int32_t first = attn_detail::first_visible(b.positions[run_start], sh.window);
        run_start = t + 1;
        for (int32_t blk = first / bs; blk <= pos / bs; ++blk)
            if (table[blk] < 0 || table[blk] >= kv.n_blocks())
                bad("block table of sequence " + std::to_string(seq) + " has an invalid block id at " +
                    std::to_string(blk));
    }
}

// Rows (token, head) per chunk: enough to amortize the F16 -> f32 conversion of each K/V tile,
// few enough that the causal triangle wastes little and prefill has many chunks to balance.
constexpr int kRowsPerChunk = 48;

// Cuts the batch into chunks, costliest first (scheduling only; results do not depend on it).
void make_chunks(const Batch& b, const Shape& sh, std::vector<Chunk>& chunks) {
    chunks.clear();
    const int64_t max_tokens = std::max(1, kRowsPerChunk / sh.group);
    for (int64_t run = 0; run < b.n_tokens;) {
        int64_t end = run + 1;
        while (end < b.n_tokens && b.seq_of_token[end] == b.seq_of_token[run]) ++end;
        for (int64_t t0 = run; t0 < end; t0 += max_tokens) {
            const int64_t t1 = std::min(end, t0 + max_tokens);
            const int64_t keys = b.positions[t1 - 1] - attn_detail::first_visible(b.positions[t0], sh.window) + 1;
            for (int g = 0; g < sh.n_head_kv; ++g) chunks.push_back({t0, t1, g, (t1 - t0) * sh.group * keys});
        }
        run = end;
    }
    std::stable_sort(chunks.begin(), chunks.end(), [](const Chunk& x, const Chunk& y) { return x.cost > y.cost; });
}

// The queries as a quantized K cache meets them, as llama.cpp's CPU flash attention does: rotated
// as the keys were (kv_cache.h), then rounded to Q8_0 (the vec_dot_type its K dot products take
// the query in; Q8_0 for both Q8_0 and Q4_0 keys) and read back as floats. An f16 K cache: q.
const float* prepare_queries(const KVCache& kv, const float* q, int64_t q_len) {
    if (kv.types().k == GGMLType::F16) return q;
    static thread_local std::vector<float> work;
    static thread_local std::vector<block_q8_0> blocks;
    work.assign(q, q + q_len);
    if (kv.rot_k()) hadamard_rotate(work.data(), q_len, kv.rot_k());
    blocks.resize((size_t)(q_len / QK8_0));
    quantize_act_row(GGMLType::Q8_0, work.data(), blocks.data(), q_len, best_isa());
    dequantize_row(GGMLType::Q8_0, blocks.data(), work.data(), q_len);
    return work.data();
}

}  // namespace

void check_attention_call(const KVCache& kv, const Batch& b, int n_head, int n_head_kv, int head_dim,
                          int window) {
    validate(kv, b, Shape{n_head, n_head_kv, head_dim, n_head_kv > 0 ? n_head / n_head_kv : 0, 1.0f, window});
}

void attention(ThreadPool& pool, const KVCache& kv, int layer, const float* q, float* out,
               const Batch& b, int n_head, int n_head_kv, int head_dim, float scale, int window, float softcap,
               AttnKernel kernel) {
    if (!(softcap >= 0.0f) || !isfinite(softcap)) throw std::invalid_argument("attention: softcap must be >= 0");
    const Shape sh{n_head, n_head_kv, head_dim, n_head_kv > 0 ? n_head / n_head_kv : 0, scale, window, softcap};
    validate(kv, b, sh);
    if (b.n_tokens == 0) return;
    // (unused where neither SIMD kernel is compiled: the call still refuses one asked for)
    [[maybe_unused]] const AttnKernel use = pick_attention_kernel(kernel, head_dim % 16 == 0, head_dim % 8 == 0);
    const int64_t q_len = b.n_tokens * (int64_t)n_head * head_dim;
    q = prepare_queries(kv, q, q_len);
    static thread_local std::vector<Chunk> chunks;   // the caller's; workers only read it
    make_chunks(b, sh, chunks);
    const Chunk* list = chunks.data();
    const int64_t n_chunks = (int64_t)chunks.size();
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n_chunks;
             i = next.fetch_add(1, std::memory_order_relaxed)) {
#if LLL_ATTN_AVX512
            if (use == AttnKernel::AVX512) {
                attn_detail::attend_chunk_avx512(kv, layer, q, out, b, list[i], sh);
                continue;
            }
#endif
#if LLL_ATTN_AVX2
            if (use == AttnKernel::AVX2) {
                attn_detail::attend_chunk_avx2(kv, layer, q, out, b, list[i], sh);
                continue;
            }
#endif
            attend_chunk_scalar(kv, layer, q, out, b, list[i], sh);
        }
    });
    if (kv.rot_v()) hadamard_rotate(out, q_len, kv.rot_v());
}

}  // namespace lll
