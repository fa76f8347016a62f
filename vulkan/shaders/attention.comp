#version 450
// attention.comp — paged attention, one workgroup per (query token, query head): softmax(scale
// q.K^T) V over the keys the token sees (its sequence's positions up to its own, within the
// sliding window), read through the sequence's block-table row from the F16 slot-major cache
// (kv_write.comp). Keys go in chunks of one per invocation with an online softmax: each chunk's
// scores raise the running maximum, which rescales the sum and the output so far. GQA: query
// head h reads kv head h / (n_head / n_head_kv).
#include "common.glsl"

layout(local_size_x_id = 0) in;   // host: kChunk (64)

layout(binding = 0) readonly buffer KV { uint kv[]; };
layout(binding = 1) readonly buffer Q { float q[]; };
layout(binding = 2) writeonly buffer Out { float outv[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) readonly buffer SeqOfToken { int seq_of_token[]; };
layout(binding = 5) readonly buffer BlockTables { int block_tables[]; };

layout(push_constant) uniform Push {
    uint T, n_head, n_head_kv, head_dim;
    uint kv_width, block_size, max_blocks, v_word_offset;
    uint window;   // 0: every earlier position
    float scale;
    float softcap;   // 0: none
} pc;

#define MAX_HEAD_DIM 256
#define CHUNK 64
#define DIMS_PER_INVOCATION (MAX_HEAD_DIM / CHUNK)

shared float q_s[MAX_HEAD_DIM];
shared float p_s[CHUNK];
shared uint slot_s[CHUNK];

float f16_at(uint index) {   // value `index` of the cache read as F16
    const vec2 pair = unpackHalf2x16(kv[index / 2u]);
    return (index & 1u) != 0u ? pair.y : pair.x;
}

void main() {
    const uint row = flat_group_id();   // t * n_head + h
    if (row >= pc.T * pc.n_head) return;
    const uint lid = gl_LocalInvocationID.x;
    const uint t = row / pc.n_head, h = row % pc.n_head;
    const uint kv_col = (h / (pc.n_head / pc.n_head_kv)) * pc.head_dim;
    const int pos = positions[t];
    const int first = pc.window > 0u ? max(pos - int(pc.window) + 1, 0) : 0;
    const uint table = uint(seq_of_token[t]) * pc.max_blocks;
    for (uint d = lid; d < pc.head_dim; d += CHUNK) q_s[d] = q[row * pc.head_dim + d];
    barrier();

    float acc[DIMS_PER_INVOCATION];
    for (uint i = 0u; i < DIMS_PER_INVOCATION; ++i) acc[i] = 0.0;
    float running_max = -1.0 / 0.0, running_sum = 0.0;
    for (int base = first; base <= pos; base += CHUNK) {
        const int j = base + int(lid);
        float score = -1.0 / 0.0;
        if (j <= pos) {
            const uint block = uint(block_tables[table + uint(j) / pc.block_size]);
            const uint slot = block * pc.block_size + uint(j) % pc.block_size;
            slot_s[lid] = slot;
            const uint k0 = (slot * pc.kv_width + kv_col) / 2u;   // kv_width, head_dim even
            float dot_qk = 0.0;
            for (uint i = 0u; i < pc.head_dim / 2u; ++i) {
                const vec2 kk = unpackHalf2x16(kv[k0 + i]);
                dot_qk = fma(q_s[2u * i], kk.x, dot_qk);
                dot_qk = fma(q_s[2u * i + 1u], kk.y, dot_qk);
            }
            score = dot_qk * pc.scale;
            if (pc.softcap > 0.0) score = tanh(score / pc.softcap) * pc.softcap;
        }
        p_s[lid] = score;
        barrier();
        float chunk_max = running_max;
        for (uint i = 0u; i < CHUNK; ++i) chunk_max = max(chunk_max, p_s[i]);
        barrier();
        p_s[lid] = j <= pos ? exp(score - chunk_max) : 0.0;
        barrier();
        const float rescale = exp(running_max - chunk_max);
        const uint n = uint(min(CHUNK, pos - base + 1));
        float chunk_sum = 0.0;
        for (uint i = 0u; i < n; ++i) chunk_sum += p_s[i];
        running_sum = running_sum * rescale + chunk_sum;
        for (uint a = 0u; a < DIMS_PER_INVOCATION; ++a) {
            const uint d = lid + a * CHUNK;
            if (d >= pc.head_dim) break;
            float sum = 0.0;
            for (uint i = 0u; i < n; ++i)
                sum = fma(p_s[i], f16_at(pc.v_word_offset * 2u + slot_s[i] * pc.kv_width + kv_col + d), sum);
            acc[a] = acc[a] * rescale + sum;
        }
        running_max = chunk_max;
        barrier();   // p_s, slot_s are rewritten by the next chunk
    }
    for (uint a = 0u; a < DIMS_PER_INVOCATION; ++a) {
        const uint d = lid + a * CHUNK;
        if (d < pc.head_dim) outv[row * pc.head_dim + d] = acc[a] / running_sum;
    }
}
