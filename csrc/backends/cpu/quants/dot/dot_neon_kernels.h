// dot_neon_kernels.h — the aarch64 integer dot products (legacy 32-blocks and K-quants), written
// once for the levels that differ only in how 16 int8 products are summed. Included by
// dot_neon.cpp, dot_dotprod.cpp and dot_i8mm.cpp inside their own namespace, after <arm_neon.h>,
// fp16.h and dot_impl.h, and after defining in that namespace
//     int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b)
// (acc plus the 16 products a[l] * b[l] spread over its 4 lanes, exact). It includes nothing
// itself, so that under dot_dotprod.cpp's target pragma no header's inline function is compiled
// for armv8.2-a.
//
// Each block's integer sum is exact, as in the scalar reference (dot_scalar.cpp); the float part
// is the scalar reference's expression, in its order (one f32 accumulation per block), so a
// kernel here differs from the reference only where the compiler contracts differently.

inline float h2f(fp16_t h) { return fp16_to_f32(h); }

inline int8x16_t s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }
inline uint8x16_t low_nibbles(uint8x16_t v) { return vandq_u8(v, vdupq_n_u8(0x0F)); }

// sum of a[l] * b[l] over 16 lanes, resp. over the 32 lanes of a0 a1 . b0 b1.
inline int dot16(int8x16_t a, int8x16_t b) { return vaddvq_s32(dot_s8(vdupq_n_s32(0), a, b)); }
inline int dot32(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
    return vaddvq_s32(dot_s8(dot_s8(vdupq_n_s32(0), a0, b0), a1, b1));
}

// The activation quants of one 32-element block against 32 weight quants (elements 0-15, 16-31).
inline int dot_block(int8x16_t q_lo, int8x16_t q_hi, const int8_t* y) {
    return dot32(q_lo, q_hi, vld1q_s8(y), vld1q_s8(y + 16));
}

// ---- legacy 32-element blocks: low nibbles of qs[j] are elements j, high nibbles 16 + j ------
// Each type: W / X its weight and activation blocks, quants() its 32 weight quants as int8
// (elements 0-15, 16-31), fold() the scalar reference's float statement for one block's exact
// integer sum (dot_scalar.cpp), shared by the 1 x 1 kernels below and dot_i8mm.cpp's 2 x 2 tiles.

struct Q4_0 {
    using W = block_q4_0;
    using X = block_q8_0;
    static void quants(const W& b, int8x16_t* lo, int8x16_t* hi) {
        const uint8x16_t q = vld1q_u8(b.qs);
        *lo = vsubq_s8(s8(low_nibbles(q)), vdupq_n_s8(8));
        *hi = vsubq_s8(s8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    }
    static float fold(float sumf, int sumi, const W& w, const X& x) { return sumf + (float)sumi * (h2f(w.d) * h2f(x.d)); }
};

struct Q4_1 {
    using W = block_q4_1;
    using X = block_q8_1;
    static void quants(const W& b, int8x16_t* lo, int8x16_t* hi) {
        const uint8x16_t q = vld1q_u8(b.qs);
        *lo = s8(low_nibbles(q));
        *hi = s8(vshrq_n_u8(q, 4));
    }
    static float fold(float sumf, int sumi, const W& w, const X& x) {
        return sumf + ((h2f(w.d) * h2f(x.d)) * (float)sumi + h2f(w.m) * h2f(x.s));
    }
};

struct Q5_0 {
    using W = block_q5_0;
    using X = block_q8_0;
    // The 5th bit of element j is bit j of the little-endian 32-bit qh, i.e. bit j % 8 of byte
    // j / 8: tested per lane against 1, 2, .., 128 and turned into 16 or 0.
    static void quants(const W& b, int8x16_t* lo, int8x16_t* hi) {
        const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
        const uint8x16_t sixteen = vdupq_n_u8(16);
        const uint8x16_t h_lo = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(b.qh[0]), vdup_n_u8(b.qh[1])), bit), sixteen);
        const uint8x16_t h_hi = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(b.qh[2]), vdup_n_u8(b.qh[3])), bit), sixteen);
        const uint8x16_t q = vld1q_u8(b.qs);
        *lo = vsubq_s8(s8(vorrq_u8(low_nibbles(q), h_lo)), vdupq_n_s8(16));
        *hi = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(q, 4), h_hi)), vdupq_n_s8(16));
    }
    static float fold(float sumf, int sumi, const W& w, const X& x) { return sumf + (float)sumi * (h2f(w.d) * h2f(x.d)); }
};

struct Q8_0 {
    using W = block_q8_0;
    using X = block_q8_0;
    static void quants(const W& b, int8x16_t* lo, int8x16_t* hi) {
        *lo = vld1q_s8(b.qs);
        *hi = vld1q_s8(b.qs + 16);
    }
    static float fold(float sumf, int sumi, const W& w, const X& x) { return sumf + (float)sumi * (h2f(w.d) * h2f(x.d)); }
};

template <class T>
float dot_legacy(int64_t n, const void* vw, const void* vx) {
    const typename T::W* w = (const typename T::W*)vw;
    const typename T::X* x = (const typename T::X*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        int8x16_t lo, hi;
        T::quants(w[i], &lo, &hi);
        sumf = T::fold(sumf, dot_block(lo, hi, x[i].qs), w[i], x[i]);
    }
    return sumf;
}

// ---- K-quants: 256-element super-blocks, activations in Q8_K ---------------------------------
// (inline: emitted only where a kernel set names them, not in dot_i8mm.cpp)

inline float dot_q4_K(int64_t n, const void* vw, const void* vx) {
    const block_q4_K* w = (const block_q4_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0, summ = 0;
        for (int j = 0; j < 4; ++j) {
            // elements 64j + l: low nibbles of qs[32j + l] (sub-block 2j), 64j + 32 + l: high ones (2j + 1)
            const uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * j), q1 = vld1q_u8(w[i].qs + 32 * j + 16);
            const int8_t* y = x[i].qs + 64 * j;
            const int lo = dot_block(s8(low_nibbles(q0)), s8(low_nibbles(q1)), y);
            const int hi = dot_block(s8(vshrq_n_u8(q0, 4)), s8(vshrq_n_u8(q1, 4)), y + 32);
            int sc, m;
            k4_scale_min(w[i].scales, 2 * j, &sc, &m);
            isum += sc * lo;
            summ += m * (x[i].bsums[4 * j] + x[i].bsums[4 * j + 1]);
            k4_scale_min(w[i].scales, 2 * j + 1, &sc, &m);
            isum += sc * hi;
            summ += m * (x[i].bsums[4 * j + 2] + x[i].bsums[4 * j + 3]);
        }
        sumf += (h2f(w[i].d) * x[i].d) * (float)isum - (h2f(w[i].dmin) * x[i].d) * (float)summ;
    }
    return sumf;
}

// Q6_K quants 128h + 32S + 16half + l (l < 16), as int8 (q - 32), from the 16 bytes at offset
// 16half of ql[64h..], ql[64h + 32..] (l0, l1) and qh[32h..] (hb): 4 low bits from l0 (S even) or
// l1 (S odd), low nibble for S < 2, high for S >= 2; 2 high bits (hb >> 2S) & 3.
template <int S>
inline int8x16_t q6_quants(uint8x16_t l0, uint8x16_t l1, uint8x16_t hb) {
    const uint8x16_t src = (S & 1) ? l1 : l0;
    const uint8x16_t low = S < 2 ? low_nibbles(src) : vshrq_n_u8(src, 4);
    uint8x16_t high;   // (hb >> 2S) << 4, masked to bits 4-5
    if constexpr (S == 0) high = vshlq_n_u8(hb, 4);
    else if constexpr (S == 1) high = vshlq_n_u8(hb, 2);
    else if constexpr (S == 2) high = hb;
    else high = vshrq_n_u8(hb, 2);
    high = vandq_u8(high, vdupq_n_u8(0x30));
    return vsubq_s8(s8(vorrq_u8(low, high)), vdupq_n_s8(32));
}

inline float dot_q6_K(int64_t n, const void* vw, const void* vx) {
    const block_q6_K* w = (const block_q6_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const int8_t* sc = w[i].scales;
        int isum = 0;
        for (int h = 0; h < 2; ++h)
            for (int half = 0; half < 2; ++half) {
                const uint8x16_t l0 = vld1q_u8(w[i].ql + 64 * h + 16 * half);
                const uint8x16_t l1 = vld1q_u8(w[i].ql + 64 * h + 32 + 16 * half);
                const uint8x16_t hb = vld1q_u8(w[i].qh + 32 * h + 16 * half);
                const int8_t* y = x[i].qs + 128 * h + 16 * half;   // group g = 8h + 2S + half
                const int g = 8 * h + half;
                isum += sc[g] * dot16(q6_quants<0>(l0, l1, hb), vld1q_s8(y));
                isum += sc[g + 2] * dot16(q6_quants<1>(l0, l1, hb), vld1q_s8(y + 32));
                isum += sc[g + 4] * dot16(q6_quants<2>(l0, l1, hb), vld1q_s8(y + 64));
                isum += sc[g + 6] * dot16(q6_quants<3>(l0, l1, hb), vld1q_s8(y + 96));
            }
        sumf += (h2f(w[i].d) * x[i].d) * (float)isum;
    }
    return sumf;
}
