// blocks_i8.glsl — a 32-element weight block as packed signed int8 for the integer-dot kernels
// (the legacy 32-element formats and IQ4_NL; one type per compilation, BLOCK_TYPE as in
// blocks.glsl, whose readers it uses). decode_block_i8 gives words q[8] (element 4i + j in byte j
// of word i) and factors (dw, mw) such that the block's dot with a q8_1 block (qx, dx, sx) is
// dw * dx * sum(q * qx) + mw * sx: mw is the block's min (Q4_1, Q5_1), 0 for the symmetric types.

// 4-bit two's-complement fields in the low nibble of each byte, sign-extended to the byte:
// (q ^ 8) sign-extended is q - 8 for q in [0, 16). 5-bit the same with bit 4.
uint sext4_bytes(uint v) { const uint b = v ^ 0x08080808u; return b | ((b & 0x08080808u) * 30u); }
uint sext5_bytes(uint v) { const uint b = v ^ 0x10101010u; return b | ((b & 0x10101010u) * 15u); }
// Bits 4i..4i+3 of qh moved to bit 4 of bytes 0..3.
uint high_bits4(uint qh, uint i) {
    const uint h = (qh >> (4u * i)) & 0xFu;
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

#if BLOCK_TYPE == GGML_Q8_0
void decode_block_i8(uint row_off, uint b, out uint q[8], out float dw, out float mw) {
    const uint off = row_off + b * BLOCK_BYTES;
    dw = rd_f16(off);
    mw = 0.0;
    for (uint i = 0u; i < 8u; ++i) q[i] = rd_u32(off + 2u + 4u * i);
}
#else
void decode_block_i8(uint row_off, uint b, out uint q[8], out float dw, out float mw) {
    const uint off = row_off + b * BLOCK_BYTES;
    uint qs[4];
    rd_16_bytes(off + QS_AT, qs);
    dw = rd_f16(off);
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
#elif BLOCK_TYPE == GGML_IQ4_NL
        uint t = 0u;
        for (uint j = 0u; j < 4u; ++j) t |= (uint(int(kvalues_iq4nl[(v >> (8u * j)) & 0xFu])) & 0xFFu) << (8u * j);
        v = t;
#endif
        q[i] = v;
    }
}
#endif
