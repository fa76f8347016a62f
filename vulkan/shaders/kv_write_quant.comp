#version 450
// kv_write_quant.comp — stores one side (keys or values) of the batch, F32 [T, kv_width], into
// each token's slot of one layer's paged cache as CACHE_TYPE (q8_0 or q4_0, -DCACHE_TYPE=GGML_Q8_0):
// a head's values rotated (rot > 0: Walsh-Hadamard chunks of rot), then quantized in blocks of 32
// exactly as the CPU's cache stores a row (kv_quant.glsl). The side's rows are slot-major,
// row_bytes each from byte side_offset of the cache (model/kv_cache.h). One workgroup per
// (token, kv head); each of the head's blocks is quantized by one invocation.
#include "common.glsl"

layout(local_size_x_id = 0) in;   // host: 64

layout(binding = 0) buffer KV { uint kv[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) readonly buffer Positions { int positions[]; };
layout(binding = 3) readonly buffer SeqOfToken { int seq_of_token[]; };
layout(binding = 4) readonly buffer BlockTables { int block_tables[]; };

layout(push_constant) uniform Push {
    uint T, n_head_kv, head_dim, block_size, max_blocks;
    uint side_offset, row_bytes;   // bytes: where this side starts in kv[], one slot's row
    uint rot;                      // 0: not rotated
    float rot_scale;               // float(1 / sqrt(rot))
} pc;

#define MAX_HEAD_DIM 256
#define KV_STORE
#include "kv_quant.glsl"

#if CACHE_TYPE == GGML_Q8_0
#define BLOCK_BYTES Q8_0_BYTES
#define STORE_BLOCK store_q8_0_block
#else
#define BLOCK_BYTES Q4_0_BYTES
#define STORE_BLOCK store_q4_0_block
#endif

void main() {
    const uint row = flat_group_id();   // t * n_head_kv + head
    if (row >= pc.T * pc.n_head_kv) return;
    const uint t = row / pc.n_head_kv, head = row % pc.n_head_kv;
    const uint lid = gl_LocalInvocationID.x;
    for (uint d = lid; d < pc.head_dim; d += gl_WorkGroupSize.x) head_s[d] = x[row * pc.head_dim + d];
    if (pc.rot > 0u) rotate_head(pc.head_dim, pc.rot, pc.rot_scale);
    else barrier();
    const uint pos = uint(positions[t]);
    const uint block = uint(block_tables[uint(seq_of_token[t]) * pc.max_blocks + pos / pc.block_size]);
    const uint slot = block * pc.block_size + pos % pc.block_size;
    const uint blocks_per_head = pc.head_dim / QK;
    if (lid < blocks_per_head)
        STORE_BLOCK(lid, pc.side_offset + slot * pc.row_bytes + (head * blocks_per_head + lid) * BLOCK_BYTES);
}
