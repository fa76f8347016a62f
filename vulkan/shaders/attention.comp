#version 450
// attention.comp — paged attention, one workgroup per (query token, query head): softmax(scale
// q.K^T) V over the keys the token sees (its sequence's positions up to its own, within the
// sliding window), read through the sequence's block-table row from the F16 slot-major cache
// (kv_write.comp). Keys go in chunks of one per invocation with an online softmax: each chunk's
// scores raise the running maximum, which rescales the sum and the output so far. GQA: query
// head h reads kv head h / (n_head / n_head_kv).
//
// K_TYPE and V_TYPE (-DK_TYPE=GGML_Q8_0) are the cache's types: F16 (the default), Q8_0 or
// Q4_0 (kv_write_quant.comp). Over a quantized K the query is prepared as the CPU prepares it
// (backends/cpu/attention.cpp prepare_queries): rotated by rot_k, then through a q8_0 round
// trip (-DINT8_DOT: kept as packed int8 and multiplied by OpSDot, where the device has it).
// Over a quantized V the output is rotated back by rot_v.
#include "common.glsl"
#ifndef K_TYPE
#define K_TYPE GGML_F16
#endif
#ifndef V_TYPE
#define V_TYPE GGML_F16
#endif

layout(local_size_x_id = 0) in;   // host: kChunk (64)

layout(binding = 0) readonly buffer KV { uint kv[]; };
layout(binding = 1) readonly buffer Q { float q[]; };
layout(binding = 2) writeonly buffer Out { float outv[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) readonly buffer SeqOfToken { int seq_of_token[]; };
layout(binding = 5) readonly buffer BlockTables { int block_tables[]; };

layout(push_constant) uniform Push {
    uint T, n_head, n_head_kv, head_dim;
    uint kv_width, block_size, max_blocks;
    uint v_offset;                 // bytes: where V starts in kv[] (K starts at 0)
    uint window;                   // 0: every earlier position
    float scale;
    float softcap;                 // 0: none
    uint k_row_bytes, v_row_bytes; // one slot's K row, V row
    uint rot_k, rot_v;             // 0: not rotated
    float rot_k_scale, rot_v_scale;
} pc;

#define MAX_HEAD_DIM 256
#define CHUNK 64
#define DIMS_PER_INVOCATION (MAX_HEAD_DIM / CHUNK)
#if K_TYPE == GGML_Q8_0
#define KEY_QUAD q8_0_quad
#define KEY_BYTES Q8_0_BYTES
#elif K_TYPE == GGML_Q4_0
#define KEY_QUAD q4_0_quad
#define KEY_BYTES Q4_0_BYTES
#endif
#include "kv_quant.glsl"   // head_s: the query, then (rot_v) the output

shared float p_s[CHUNK];
shared uint slot_s[CHUNK];

float f16_at(uint index) {   // value `index` of the cache read as F16
    const vec2 pair = unpackHalf2x16(kv[index / 2u]);
    return (index & 1u) != 0u ? pair.y : pair.x;
}

// q . K of the key at `slot` over kv head columns [kv_col, kv_col + head_dim).
float key_dot(uint slot, uint kv_col) {
#if K_TYPE == GGML_F16
    const uint k0 = (slot * pc.kv_width + kv_col) / 2u;   // kv_width, head_dim even
    float dot_qk = 0.0;
    for (uint i = 0u; i < pc.head_dim / 2u; ++i) {
        const vec2 kk = unpackHalf2x16(kv[k0 + i]);
        dot_qk = fma(head_s[2u * i], kk.x, dot_qk);
        dot_qk = fma(head_s[2u * i + 1u], kk.y, dot_qk);
    }
    return dot_qk;
#else
    return dot_head_key(slot * pc.k_row_bytes + kv_col / QK * KEY_BYTES, pc.head_dim);
#endif
}

// V's value at column c (of kv_width) of the key at `slot`.
float value_at(uint slot, uint c) {
#if V_TYPE == GGML_F16
    return f16_at(pc.v_offset / 2u + slot * pc.kv_width + c);   // v_offset a multiple of 4
#elif V_TYPE == GGML_Q8_0
    return q8_0_value(pc.v_offset + slot * pc.v_row_bytes + c / QK * Q8_0_BYTES, c % QK);
#else
    return q4_0_value(pc.v_offset + slot * pc.v_row_bytes + c / QK * Q4_0_BYTES, c % QK);
#endif
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
    for (uint d = lid; d < pc.head_dim; d += CHUNK) head_s[d] = q[row * pc.head_dim + d];
#if K_TYPE != GGML_F16
    if (pc.rot_k > 0u) rotate_head(pc.head_dim, pc.rot_k, pc.rot_k_scale);
#ifdef INT8_DOT
    q8_0_pack_head(pc.head_dim);
#else
    q8_0_round_trip_head(pc.head_dim);
#endif
#endif
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
            score = key_dot(slot, kv_col) * pc.scale;
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
                sum = fma(p_s[i], value_at(slot_s[i], kv_col + d), sum);
            acc[a] = acc[a] * rescale + sum;
        }
        running_max = chunk_max;
        barrier();   // p_s, slot_s are rewritten by the next chunk
    }
#if V_TYPE != GGML_F16
    if (pc.rot_v > 0u) {   // the output of rotated values, rotated back (H H = I)
        for (uint a = 0u; a < DIMS_PER_INVOCATION; ++a) {
            const uint d = lid + a * CHUNK;
            if (d < pc.head_dim) head_s[d] = acc[a] / running_sum;
        }
        rotate_head(pc.head_dim, pc.rot_v, pc.rot_v_scale);
        for (uint d = lid; d < pc.head_dim; d += CHUNK) outv[row * pc.head_dim + d] = head_s[d];
        return;
    }
#endif
    for (uint a = 0u; a < DIMS_PER_INVOCATION; ++a) {
        const uint d = lid + a * CHUNK;
        if (d < pc.head_dim) outv[row * pc.head_dim + d] = acc[a] / running_sum;
    }
}
