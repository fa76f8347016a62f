// byte_reads.glsl — bytes, 16-bit and 32-bit values at byte offsets of a buffer bound as 32-bit
// words (BYTE_READS_BUFFER: the including kernel's array, little-endian): no 8/16-bit storage feature needed.
// A 32-bit read at an offset that is not a multiple of 4 reads the next word too.

uint rd_u8(uint off) { return (BYTE_READS_BUFFER[off >> 2] >> ((off & 3u) << 3)) & 0xFFu; }
uint rd_u16(uint off) { return (BYTE_READS_BUFFER[off >> 2] >> ((off & 2u) << 3)) & 0xFFFFu; }   // off even
uint rd_u32(uint off) {
    const uint s = (off & 3u) << 3;
    const uint lo = BYTE_READS_BUFFER[off >> 2];
    return s == 0u ? lo : (lo >> s) | (BYTE_READS_BUFFER[(off >> 2) + 1u] << (32u - s));
}
float rd_f16(uint off) { return unpackHalf2x16(rd_u16(off)).x; }
int rd_i8(uint off) { return bitfieldExtract(int(rd_u8(off)), 0, 8); }
