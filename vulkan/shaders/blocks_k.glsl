// blocks_k.glsl — the super-block formats (Q2_K .. Q6_K, IQ4_XS) for blocks.glsl. Each chunk of
// 16 elements shares one scale (Q2_K, Q3_K, Q6_K) or is half of a 32-element sub-block (Q4_K,
// Q5_K, IQ4_XS), so a chunk unpacks its scale once.

#if BLOCK_TYPE == GGML_Q4_K || BLOCK_TYPE == GGML_Q5_K
// 6-bit scale and min of sub-block j (ggml's get_scale_min_k4) from the 12 bytes at off.
void scale_min_k4(uint off, uint j, out float sc, out float mn) {
    if (j < 4u) {
        sc = float(rd_u8(off + j) & 63u);
        mn = float(rd_u8(off + j + 4u) & 63u);
    } else {
        sc = float((rd_u8(off + j + 4u) & 0xFu) | ((rd_u8(off + j - 4u) >> 6) << 4));
        mn = float((rd_u8(off + j + 4u) >> 4) | ((rd_u8(off + j) >> 6) << 4));
    }
}
#endif

#if BLOCK_TYPE == GGML_Q2_K
#define BLOCK_BYTES 84u
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 4) * BLOCK_BYTES, cb = c & 15u;
    const float d = rd_f16(b + 80u), dmin = rd_f16(b + 82u);
    const uint sc = rd_u8(b + cb);
    const float dl = d * float(sc & 0xFu), ml = dmin * float(sc >> 4);
    const uint shift = 2u * ((cb & 7u) >> 1);
    uint qs[4];
    rd_16_bytes(b + 16u + 32u * (cb >> 3) + 16u * (cb & 1u), qs);
    for (uint j = 0u; j < 16u; ++j) {
        precise float y = dl * float((byte_at(qs, j) >> shift) & 3u) - ml;
        v[j] = y;
    }
}

#elif BLOCK_TYPE == GGML_Q3_K
#define BLOCK_BYTES 110u
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 4) * BLOCK_BYTES, cb = c & 15u;
    const float d = rd_f16(b + 108u);
    const uint low = cb < 8u ? rd_u8(b + 96u + cb) & 0xFu : rd_u8(b + 96u + cb - 8u) >> 4;
    const uint high = (rd_u8(b + 104u + (cb & 3u)) >> (2u * (cb >> 2))) & 3u;
    const float dl = d * float(int(low | (high << 4)) - 32);
    const uint shift = 2u * ((cb & 7u) >> 1), hbit = cb >> 1;
    uint qs[4], hm[4];
    rd_16_bytes(b + 32u + 32u * (cb >> 3) + 16u * (cb & 1u), qs);
    rd_16_bytes(b + 16u * (cb & 1u), hm);
    for (uint j = 0u; j < 16u; ++j) {
        const int q = int((byte_at(qs, j) >> shift) & 3u) - (((byte_at(hm, j) >> hbit) & 1u) != 0u ? 0 : 4);
        v[j] = dl * float(q);
    }
}

#elif BLOCK_TYPE == GGML_Q4_K || BLOCK_TYPE == GGML_Q5_K
#if BLOCK_TYPE == GGML_Q4_K
#define BLOCK_BYTES 144u
#define QS_AT 16u
#else
#define BLOCK_BYTES 176u
#define QS_AT 48u
#endif
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 4) * BLOCK_BYTES, cb = c & 15u;
    const uint g = cb >> 2, hi = (cb >> 1) & 1u;   // group of 64, high nibbles (2nd sub-block)
    const float d = rd_f16(b), dmin = rd_f16(b + 2u);
    float sc, mn;
    scale_min_k4(b + 4u, 2u * g + hi, sc, mn);
    const float d1 = d * sc, m1 = dmin * mn;
    uint qs[4];
    rd_16_bytes(b + QS_AT + 32u * g + 16u * (cb & 1u), qs);
#if BLOCK_TYPE == GGML_Q5_K
    uint qh[4];
    rd_16_bytes(b + 16u + 16u * (cb & 1u), qh);
    const uint hbit = 2u * g + hi;
#endif
    for (uint j = 0u; j < 16u; ++j) {
        uint q = (byte_at(qs, j) >> (4u * hi)) & 0xFu;
#if BLOCK_TYPE == GGML_Q5_K
        q += ((byte_at(qh, j) >> hbit) & 1u) * 16u;
#endif
        precise float y = d1 * float(q) - m1;
        v[j] = y;
    }
}

#elif BLOCK_TYPE == GGML_Q6_K
#define BLOCK_BYTES 210u
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 4) * BLOCK_BYTES, cb = c & 15u;
    const uint h = cb >> 3, qd = (cb & 7u) >> 1, lo16 = cb & 1u;   // half of 128, quarter of it
    const float d = rd_f16(b + 208u);
    const float dl = d * float(rd_i8(b + 192u + 8u * h + lo16 + 2u * qd));
    uint ql[4], qh[4];
    rd_16_bytes(b + 64u * h + 16u * lo16 + ((qd & 1u) != 0u ? 32u : 0u), ql);
    rd_16_bytes(b + 128u + 32u * h + 16u * lo16, qh);
    const uint nib = qd >= 2u ? 4u : 0u, hshift = 2u * qd;
    for (uint j = 0u; j < 16u; ++j) {
        const int q = int(((byte_at(ql, j) >> nib) & 0xFu) | (((byte_at(qh, j) >> hshift) & 3u) << 4)) - 32;
        v[j] = dl * float(q);
    }
}

#elif BLOCK_TYPE == GGML_IQ4_XS
#define BLOCK_BYTES 136u
void decode_chunk16(uint row_off, uint c, uint K, out float v[16]) {
    const uint b = row_off + (c >> 4) * BLOCK_BYTES, cb = c & 15u;
    const uint ib = cb >> 1, hi = cb & 1u;
    const float d = rd_f16(b);
    const uint ls = ((rd_u8(b + 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xFu) | (((rd_u16(b + 2u) >> (2u * ib)) & 3u) << 4);
    const float dl = d * float(int(ls) - 32);
    uint qs[4];
    rd_16_bytes(b + 8u + 16u * ib, qs);
    for (uint j = 0u; j < 16u; ++j) v[j] = dl * kvalues_iq4nl[(byte_at(qs, j) >> (4u * hi)) & 0xFu];
}

#else
#error "BLOCK_TYPE: not a type the Vulkan kernels read"
#endif
