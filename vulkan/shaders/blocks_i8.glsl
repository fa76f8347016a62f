// blocks_i8.glsl — 32 consecutive weights as packed signed int8 for the integer-dot kernels (the
// 32-element formats, IQ4_NL, and the 32-element sub-blocks of Q4_K, Q5_K and Q6_K; one type per
// compilation, BLOCK_TYPE as in blocks.glsl, whose readers it uses). decode_block_i8(row_off, b)
// gives words q[8] for elements [32b, 32b + 32) of the row (element 4i + j in byte j of word i)
// and factors such that their dot with a q8_1 block (qx, dx, sx) is
//     dw.x * dx * sum(q[0..3] * qx) + dw.y * dx * sum(q[4..7] * qx) + mw * sx:
// dw.x = dw.y but for the types with a scale per 16 elements (Q2_K, Q3_K, Q6_K: I8_SCALE_PER_16);
// mw the block's min (Q4_1, Q5_1; -dmin * m for Q4_K, Q5_K), 0 for the symmetric types. Q2_K has a
// min per 16 elements too (I8_MIN_PER_16): mw is then a vec2 and multiplies dx times the sum of
// each half's qx, since q8_1's s sums all 32.

// 4-bit two's-complement fields in the low nibble of each byte, sign-extended to the byte:
// (q ^ 8) sign-extended is q - 8 for q in [0, 16). 5-bit the same with bit 4.
uint sext4_bytes(uint v) { const uint b = v ^ 0x08080808u; return b | ((b & 0x08080808u) * 30u); }
uint sext5_bytes(uint v) { const uint b = v ^ 0x10101010u; return b | ((b & 0x10101010u) * 15u); }
uint sext6_bytes(uint v) { const uint b = v ^ 0x20202020u; return b | ((b & 0x20202020u) * 6u); }
uint sext3_bytes(uint v) { const uint b = v ^ 0x04040404u; return b | ((b & 0x04040404u) * 62u); }
// Bits 4i..4i+3 of qh moved to bit 4 of bytes 0..3.
uint high_bits4(uint qh, uint i) {
    const uint h = (qh >> (4u * i)) & 0xFu;
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

#if BLOCK_TYPE == GGML_Q8_0
void decode_block_i8(uint row_off, uint b, out uint q[8], out vec2 dw, out float mw) {
    const uint off = row_off + b * BLOCK_BYTES;
    dw = vec2(rd_f16(off));
    mw = 0.0;
    for (uint i = 0u; i < 8u; ++i) q[i] = rd_u32(off + 2u + 4u * i);
}
#elif BLOCK_TYPE == GGML_Q4_0 || BLOCK_TYPE == GGML_Q4_1 || BLOCK_TYPE == GGML_Q5_0 || BLOCK_TYPE == GGML_Q5_1 || \
      BLOCK_TYPE == GGML_IQ4_NL || BLOCK_TYPE == GGML_IQ4_XS
// IQ4_XS: sub-block b % 8 of a super-block, laid out as an IQ4_NL block with a 6-bit scale.
void decode_block_i8(uint row_off, uint b, out uint q[8], out vec2 dw, out float mw) {
#if BLOCK_TYPE == GGML_IQ4_XS
    const uint sb = row_off + (b >> 3) * BLOCK_BYTES, ib = b & 7u;
    const uint ls = ((rd_u8(sb + 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xFu) | (((rd_u16(sb + 2u) >> (2u * ib)) & 3u) << 4);
    uint qs[4];
    rd_16_bytes(sb + 8u + 16u * ib, qs);
    dw = vec2(rd_f16(sb) * float(int(ls) - 32));
#else
    const uint off = row_off + b * BLOCK_BYTES;
    uint qs[4];
    rd_16_bytes(off + QS_AT, qs);
    dw = vec2(rd_f16(off));
#endif
#if BLOCK_TYPE == GGML_Q4_1 || BLOCK_TYPE == GGML_Q5_1
    mw = rd_f16(off + 2u);
#else
    mw = 0.0;
#endif
#if BLOCK_TYPE == GGML_Q5_0
    const uint qh = rd_u32(off + 2u);
#elif BLOCK_TYPE == GGML_Q5_1
    const uint qh = rd_u32(off + 4u);
#endif
    for (uint i = 0u; i < 8u; ++i) {
        // words 0-3: the low nibbles (elements 0-15), words 4-7: the high ones (16-31)
        uint v = (i < 4u ? qs[i] : qs[i - 4u] >> 4) & 0x0F0F0F0Fu;
#if BLOCK_TYPE == GGML_Q4_0
        v = sext4_bytes(v);
#elif BLOCK_TYPE == GGML_Q5_0
        v = sext5_bytes(v | high_bits4(qh, i));
#elif BLOCK_TYPE == GGML_Q5_1
        v |= high_bits4(qh, i);
#elif BLOCK_TYPE == GGML_IQ4_NL || BLOCK_TYPE == GGML_IQ4_XS
        uint t = 0u;
        for (uint j = 0u; j < 4u; ++j) t |= (uint(int(kvalues_iq4nl[(v >> (8u * j)) & 0xFu])) & 0xFFu) << (8u * j);
        v = t;
#endif
        q[i] = v;
    }
}

#elif BLOCK_TYPE == GGML_Q2_K || BLOCK_TYPE == GGML_Q3_K
#define I8_SCALE_PER_16   // dw.x and dw.y differ
#if BLOCK_TYPE == GGML_Q2_K
#define I8_MIN_PER_16     // and so do mw.x and mw.y
#endif
// Sub-block j (chunks 2j and 2j + 1 of blocks_k.glsl's decode_chunk16): 2 bits of each of the 32
// qs bytes from 32 (j / 4) on, at bit 2 (j % 4); Q3_K adds bit j of each of the 32 hmask bytes,
// clear meaning minus 4. The scales and mins as decode_chunk16 reads them.
#if BLOCK_TYPE == GGML_Q2_K
void decode_block_i8(uint row_off, uint b, out uint q[8], out vec2 dw, out vec2 mw) {
    const uint off = row_off + (b >> 3) * BLOCK_BYTES, j = b & 7u;
    const float d = rd_f16(off + 80u), dmin = rd_f16(off + 82u);
    const uint s0 = rd_u8(off + 2u * j), s1 = rd_u8(off + 2u * j + 1u);
    dw = vec2(d * float(s0 & 0xFu), d * float(s1 & 0xFu));
    mw = vec2(-(dmin * float(s0 >> 4)), -(dmin * float(s1 >> 4)));
    const uint qs = off + 16u + 32u * (j >> 2), shift = 2u * (j & 3u);
    for (uint i = 0u; i < 8u; ++i) q[i] = (rd_u32(qs + 4u * i) >> shift) & 0x03030303u;
}
#else
float q3_k_scale(uint off, uint cb) {
    const uint low = cb < 8u ? rd_u8(off + 96u + cb) & 0xFu : rd_u8(off + 96u + cb - 8u) >> 4;
    const uint high = (rd_u8(off + 104u + (cb & 3u)) >> (2u * (cb >> 2))) & 3u;
    return float(int(low | (high << 4)) - 32);
}
void decode_block_i8(uint row_off, uint b, out uint q[8], out vec2 dw, out float mw) {
    const uint off = row_off + (b >> 3) * BLOCK_BYTES, j = b & 7u;
    const float d = rd_f16(off + 108u);
    dw = vec2(d * q3_k_scale(off, 2u * j), d * q3_k_scale(off, 2u * j + 1u));
    mw = 0.0;
    const uint qs = off + 32u + 32u * (j >> 2), shift = 2u * (j & 3u);
    for (uint i = 0u; i < 8u; ++i) {
        const uint lo = (rd_u32(qs + 4u * i) >> shift) & 0x03030303u;
        const uint hi = ((rd_u32(off + 4u * i) >> j) & 0x01010101u) << 2;
        q[i] = sext3_bytes(lo | hi);   // (lo + 4 hi) - 4
    }
}
#endif

#elif BLOCK_TYPE == GGML_Q4_K || BLOCK_TYPE == GGML_Q5_K
// Sub-block j of a super-block: the low (j even) or high nibbles of its pair's 32 bytes of qs;
// Q5_K's fifth bit is bit j of each of the 32 qh bytes.
void decode_block_i8(uint row_off, uint b, out uint q[8], out vec2 dw, out float mw) {
    const uint off = row_off + (b >> 3) * BLOCK_BYTES, j = b & 7u;
    float sc, mn;
    scale_min_k4(off + 4u, j, sc, mn);
    dw = vec2(rd_f16(off) * sc);
    mw = -(rd_f16(off + 2u) * mn);
    const uint shift = 4u * (j & 1u);
    for (uint i = 0u; i < 8u; ++i) {
        uint v = (rd_u32(off + QS_AT + 32u * (j >> 1) + 4u * i) >> shift) & 0x0F0F0F0Fu;
#if BLOCK_TYPE == GGML_Q5_K
        v |= ((rd_u32(off + 16u + 4u * i) >> j) & 0x01010101u) << 4;
#endif
        q[i] = v;
    }
}

#elif BLOCK_TYPE == GGML_Q6_K
#define I8_SCALE_PER_16   // dw.x and dw.y differ
// Sub-block j: quarter qd = j % 4 of half h = j / 4; 4 bits from ql (low or high nibbles), 2 from
// qh (bits 2qd, 2qd + 1), minus 32; one int8 scale per 16 elements.
void decode_block_i8(uint row_off, uint b, out uint q[8], out vec2 dw, out float mw) {
    const uint off = row_off + (b >> 3) * BLOCK_BYTES, j = b & 7u;
    const uint h = j >> 2, qd = j & 3u;
    const float d = rd_f16(off + 208u);
    const uint sc = off + 192u + 8u * h + 2u * qd;
    dw = vec2(d * float(rd_i8(sc)), d * float(rd_i8(sc + 1u)));
    mw = 0.0;
    const uint ql = off + 64u * h + ((qd & 1u) != 0u ? 32u : 0u), qh = off + 128u + 32u * h;
    const uint nib = qd >= 2u ? 4u : 0u;
    for (uint i = 0u; i < 8u; ++i) {
        const uint lo = (rd_u32(ql + 4u * i) >> nib) & 0x0F0F0F0Fu;
        const uint hi = ((rd_u32(qh + 4u * i) >> (2u * qd)) & 0x03030303u) << 4;
        q[i] = sext6_bytes(lo | hi);
    }
}
#endif


#ifdef I8_MIN_PER_16
#define I8_MIN_T vec2
#else
#define I8_MIN_T float
#endif

// A block's sum from its integer dot products with a q8_1 block (d, s) = ds: lo over elements
// 0-15, hi over 16-31; sx the q8_1 block's two halves' quant sums (read for the mins per 16 only).
// One `precise` expression for both integer-dot kernels, so their block sums are the same bits.
float block_sum_i8(int lo, int hi, vec2 dw, I8_MIN_T mw, vec2 ds, vec2 sx) {
    precise float v;
#if defined(I8_MIN_PER_16)
    v = ((dw.x * float(lo) + dw.y * float(hi)) + (mw.x * sx.x + mw.y * sx.y)) * ds.x;
#elif defined(I8_SCALE_PER_16)
    v = (dw.x * float(lo) + dw.y * float(hi)) * ds.x + mw * ds.y;
#else
    v = dw.x * float(lo + hi) * ds.x + mw * ds.y;
#endif
    return v;
}
