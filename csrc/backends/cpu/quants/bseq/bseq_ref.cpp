// bseq_ref.cpp — the block-sequential definition (bseq.h) in plain C++, and the activation
// split shared by the SIMD kernels. Every fast path is tested bit-for-bit against dot_ref.
#include "backends/cpu/quants/bseq/bseq.h"

#include <math.h>
#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/fp16.h"
#include "backends/cpu/quants/dot/dot_impl.h"

namespace lll {
namespace bseq {

BseqFamily family(GGMLType t) {
    const TypeTraits* tt = type_traits(t);
    return tt ? tt->bseq : BseqFamily::None;
}

bool supported(GGMLType t) { return family(t) != BseqFamily::None; }

namespace {

inline float h2f(fp16_t h) { return fp16_to_f32(h); }

// Quants j and j + 16 (j < 16) of a legacy block: low and high nibble of byte j, plus the 5th
// bits (bits j and j + 16 of qh) for Q5 types.
inline int fifth(const uint8_t* qh, int j) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return (int)((h >> j) & 1) << 4;
}
struct Q4_0Q { static int lo(const block_q4_0& b, int j) { return b.qs[j] & 0x0F; }
               static int hi(const block_q4_0& b, int j) { return b.qs[j] >> 4; } };
struct Q4_1Q { static int lo(const block_q4_1& b, int j) { return b.qs[j] & 0x0F; }
               static int hi(const block_q4_1& b, int j) { return b.qs[j] >> 4; } };
struct Q5_0Q { static int lo(const block_q5_0& b, int j) { return (b.qs[j] & 0x0F) | fifth(b.qh, j); }
               static int hi(const block_q5_0& b, int j) { return (b.qs[j] >> 4) | fifth(b.qh, j + 16); } };
struct Q5_1Q { static int lo(const block_q5_1& b, int j) { return (b.qs[j] & 0x0F) | fifth(b.qh, j); }
               static int hi(const block_q5_1& b, int j) { return (b.qs[j] >> 4) | fifth(b.qh, j + 16); } };
struct Q8_0Q { static int lo(const block_q8_0& b, int j) { return b.qs[j]; }
               static int hi(const block_q8_0& b, int j) { return b.qs[j + 16]; } };

template <class WB, class XB, class Q, int kBias>
float dot_legacy(int64_t n, const void* vw, const void* vx) {
    const WB* w = (const WB*)vw;
    const XB* x = (const XB*)vx;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 32; ++i) {
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j)
            isum += (Q::lo(w[i], j) - kBias) * x[i].qs[j] + (Q::hi(w[i], j) - kBias) * x[i].qs[j + 16];
        acc = fmaf((float)isum, h2f(w[i].d) * h2f(x[i].d), acc);
        if constexpr (sizeof(XB) == sizeof(block_q8_1)) acc = fmaf(h2f(w[i].m), h2f(x[i].s), acc);
    }
    return acc;
}

// Q4_K / Q5_K: element l of sub-block j sits in byte 32 (j / 2) + l, low nibble for even j.
template <class WB, bool kFifth>
float dot_k4(int64_t n, const void* vw, const void* vx) {
    const WB* w = (const WB*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
            int sc, mn;
            kern::k4_scale_min(w[i].scales, j, &sc, &mn);
            int32_t c = 0;
            for (int l = 0; l < 32; ++l) {
                const uint8_t byte = w[i].qs[32 * (j / 2) + l];
                int q = (j % 2) ? (byte >> 4) : (byte & 0x0F);
                if constexpr (kFifth) q |= ((w[i].qh[l] >> j) & 1) << 4;
                c += q * x[i].qs[32 * j + l];
            }
            isum += sc * c;
            msum += mn * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        acc = fmaf((float)isum, h2f(w[i].d) * x[i].d, acc);
        acc = fmaf((float)msum, -(h2f(w[i].dmin) * x[i].d), acc);
    }
    return acc;
}

float dot_q6_K(int64_t n, const void* vw, const void* vx) {
    const block_q6_K* w = (const block_q6_K*)vw;
    const block_q8_K* x = (const block_q8_K*)vx;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int32_t isum = 0;
        for (int h = 0; h < 16; ++h) {              // sub-block of 16 elements
            int32_t c = 0;
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * h + l;           // element: half e / 128, quarter (e / 32) % 4
                const int half = e / 128, quarter = (e / 32) % 4, ll = e % 32;
                const uint8_t qlb = w[i].ql[64 * half + ll + 32 * (quarter % 2)];
                const int lo = quarter < 2 ? (qlb & 0x0F) : (qlb >> 4);
                const int hi = (w[i].qh[32 * half + ll] >> (2 * quarter)) & 3;
                c += ((lo | (hi << 4)) - 32) * x[i].qs[e];
            }
            isum += w[i].scales[h] * c;
        }
        acc = fmaf((float)isum, h2f(w[i].d) * x[i].d, acc);
    }
    return acc;
}

}  // namespace

float dot_ref(GGMLType t, int64_t n, const void* w, const void* x) {
    switch (t) {
        case GGMLType::Q4_0: return dot_legacy<block_q4_0, block_q8_0, Q4_0Q, 8>(n, w, x);
        case GGMLType::Q4_1: return dot_legacy<block_q4_1, block_q8_1, Q4_1Q, 0>(n, w, x);
        case GGMLType::Q5_0: return dot_legacy<block_q5_0, block_q8_0, Q5_0Q, 16>(n, w, x);
        case GGMLType::Q5_1: return dot_legacy<block_q5_1, block_q8_1, Q5_1Q, 0>(n, w, x);
        case GGMLType::Q8_0: return dot_legacy<block_q8_0, block_q8_0, Q8_0Q, 0>(n, w, x);
        case GGMLType::Q4_K: return dot_k4<block_q4_K, false>(n, w, x);
        case GGMLType::Q5_K: return dot_k4<block_q5_K, true>(n, w, x);
        case GGMLType::Q6_K: return dot_q6_K(n, w, x);
        default: throw std::invalid_argument("bseq::dot_ref: unsupported weight type");
    }
}

// ---- activation split -----------------------------------------------------------------------

namespace {

bool is_kquant(GGMLType t) { return t == GGMLType::Q4_K || t == GGMLType::Q5_K || t == GGMLType::Q6_K; }
bool has_min(GGMLType t) { return t == GGMLType::Q4_1 || t == GGMLType::Q5_1; }
int legacy_bias(GGMLType t) {
    return t == GGMLType::Q4_0 ? 8 : t == GGMLType::Q5_0 ? 16 : t == GGMLType::Q8_0 ? 128 : 0;
}

size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

}  // namespace

size_t act_pack_bytes(GGMLType t, int64_t M, int64_t K) {
    const int64_t nu = K / 32, ng = is_kquant(t) ? K / QK_K : nu;
    // quants, d per group, one 4-byte value per unit (bsum pair, s or bias), alignment slack
    return align64((size_t)(M * K)) + align64((size_t)(M * ng) * 4) + align64((size_t)(M * nu) * 4) + 64;
}

void act_pack_init(GGMLType t, int64_t M, int64_t K, void* buf, ActPack* ap) {
    const int64_t nu = K / 32, ng = is_kquant(t) ? K / QK_K : nu;
    uint8_t* p = (uint8_t*)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    ap->M = M;
    ap->K = K;
    ap->q = (int8_t*)p;  p += align64((size_t)(M * K));
    ap->d = (float*)p;   p += align64((size_t)(M * ng) * 4);
    ap->s = nullptr; ap->nbias = nullptr; ap->bsum = nullptr;
    if (is_kquant(t)) ap->bsum = (int32_t*)p;
    else if (has_min(t)) ap->s = (float*)p;
    else ap->nbias = (int32_t*)p;
}

void act_pack_rows(GGMLType t, const uint8_t* Xq, size_t xs, int64_t m0, int64_t m1, ActPack* ap) {
    const int64_t K = ap->K, nu = K / 32;
    for (int64_t m = m0; m < m1; ++m) {
        const uint8_t* row = Xq + m * xs;
        int8_t* q = ap->q + m * K;
        if (is_kquant(t)) {
            const block_q8_K* x = (const block_q8_K*)row;
            for (int64_t g = 0; g < K / QK_K; ++g) {
                memcpy(q + g * QK_K, x[g].qs, QK_K);
                ap->d[m * (K / QK_K) + g] = x[g].d;
                for (int j = 0; j < 8; ++j) {   // int16 pair: sums of the two 16-halves of unit j
                    const uint32_t lo = (uint16_t)x[g].bsums[2 * j], hi = (uint16_t)x[g].bsums[2 * j + 1];
                    ap->bsum[m * nu + g * 8 + j] = (int32_t)(lo | (hi << 16));
                }
            }
        } else if (has_min(t)) {
            const block_q8_1* x = (const block_q8_1*)row;
            for (int64_t u = 0; u < nu; ++u) {
                memcpy(q + 32 * u, x[u].qs, 32);
                ap->d[m * nu + u] = h2f(x[u].d);
                ap->s[m * nu + u] = h2f(x[u].s);
            }
        } else {
            const block_q8_0* x = (const block_q8_0*)row;
            const int bias = legacy_bias(t);
            for (int64_t u = 0; u < nu; ++u) {
                memcpy(q + 32 * u, x[u].qs, 32);
                ap->d[m * nu + u] = h2f(x[u].d);
                int32_t sum = 0;
                for (int j = 0; j < 32; ++j) sum += x[u].qs[j];
                ap->nbias[m * nu + u] = -bias * sum;
            }
        }
    }
}

// ---- repacked panels ------------------------------------------------------------------------

size_t repacked_bytes(GGMLType, int64_t N, size_t ws) {
    return (size_t)((N + kPanel - 1) / kPanel) * kPanel * ws;
}

namespace {

// The fields bseq_avx512.cpp's packer reads for one scale group of a panel, in its order: each
// {offset, bytes} is taken from all 16 rows, row after row (a 16-row transpose when repeated over
// consecutive dwords). The group is a 32-block for the legacy types, a 256-block for K-quants.
struct Field { int off, bytes; };
std::vector<Field> group_fields(GGMLType t) {
    std::vector<Field> f;
    auto dwords = [&](int off, int n) { for (int i = 0; i < n; ++i) f.push_back({off + 4 * i, 4}); };
    switch (t) {
        case GGMLType::Q4_0: dwords(2, 4); f.push_back({0, 2}); break;
        case GGMLType::Q4_1: dwords(4, 4); f.push_back({0, 2}); f.push_back({2, 2}); break;
        case GGMLType::Q5_0: dwords(6, 4); dwords(2, 1); f.push_back({0, 2}); break;
        case GGMLType::Q5_1: dwords(8, 4); dwords(4, 1); f.push_back({0, 2}); f.push_back({2, 2}); break;
        case GGMLType::Q8_0: dwords(2, 8); f.push_back({0, 2}); break;
        case GGMLType::Q4_K: case GGMLType::Q5_K: {
            const bool q5 = t == GGMLType::Q5_K;
            if (q5) dwords(16, 8);                              // qh
            dwords(4, 3);                                       // scales and mins
            for (int c = 0; c < 4; ++c) dwords((q5 ? 48 : 16) + 32 * c, 8);
            dwords(0, 1);                                       // d, dmin
            break;
        }
        case GGMLType::Q6_K:
            dwords(192, 4);                                     // scales
            for (int half = 0; half < 2; ++half) {
                dwords(64 * half, 8);                           // ql, low nibbles' bytes
                dwords(64 * half + 32, 8);
                dwords(128 + 32 * half, 8);                     // qh
            }
            f.push_back({208, 2});                              // d
            break;
        default: throw std::invalid_argument("bseq::repack_panels_portable: unsupported weight type");
    }
    return f;
}

}  // namespace

void repack_panels_portable(GGMLType t, const uint8_t* W, size_t ws, int64_t N, int64_t K, uint8_t* dst,
                            int64_t p0, int64_t p1) {
    const std::vector<Field> fields = group_fields(t);
    const TypeTraits& tt = *type_traits(t);
    for (int64_t p = p0; p < p1; ++p) {
        const uint8_t* row[kPanel];
        for (int r = 0; r < kPanel; ++r)   // rows past N repeat the last one
            row[r] = W + (p * kPanel + std::min<int64_t>(r, N - 1 - p * kPanel)) * ws;
        uint8_t* out = dst + p * kPanel * ws;
        for (int64_t g = 0; g < K / tt.block_elems; ++g) {
            const size_t base = (size_t)g * tt.block_bytes;
            for (const Field& f : fields) {   // fixed-size copies: single moves, not memcpy calls
                if (f.bytes == 4)
                    for (int r = 0; r < kPanel; ++r, out += 4) memcpy(out, row[r] + base + f.off, 4);
                else
                    for (int r = 0; r < kPanel; ++r, out += 2) memcpy(out, row[r] + base + f.off, 2);
            }
        }
        if (out != dst + (p + 1) * kPanel * ws)
            throw std::logic_error("bseq::repack_panels_portable: panel size differs from the GGUF rows'");
    }
}

}  // namespace bseq
}  // namespace lll
