// ref_iq_lowbit.cpp — reference dequantization of the low-bit i-quants IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS and IQ3_S (blocks.h has their layouts). Each weight is a grid byte (the generated
// iq_grids_data.h) times a sub-block scale times a sign, as ggml's dequantize_row_iq*: the same
// float operations in the same order, so the floats match gguf-py's and llama.cpp's exactly.
#include <string.h>

#include "common/blocks.h"
#include "common/fp16.h"
#include "backends/cpu/quants/ref/ref_rows.h"
#include "iq_grids_data.h"

namespace lll {
namespace ref {

namespace {

// y[j] = scale * grid[j] * (sign bit j of `signs` ? -1 : 1), j < n.
inline void put_signed(float scale, const uint8_t* grid, uint8_t signs, int n, float* y) {
    for (int j = 0; j < n; ++j) y[j] = scale * grid[j] * ((signs >> j) & 1 ? -1.f : 1.f);
}

inline const uint8_t* grid_bytes(const uint64_t* grid, int index) { return (const uint8_t*)(grid + index); }
inline const uint8_t* grid_bytes(const uint32_t* grid, int index) { return (const uint8_t*)(grid + index); }

}  // namespace

void dequantize_iq2_xxs(const void* src, float* dst, int64_t k) {
    const block_iq2_xxs* x = static_cast<const block_iq2_xxs*>(src);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            uint32_t aux[2];
            memcpy(aux, x[i].qs + 4 * ib, sizeof(aux));
            const uint8_t* idx = (const uint8_t*)aux;
            const float db = d * (0.5f + (aux[1] >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
                float* y = dst + i * QK_K + 32 * ib + 8 * l;
                put_signed(db, grid_bytes(iq::iq2xxs_grid, idx[l]), iq::ksigns_iq2xs[(aux[1] >> 7 * l) & 127], 8, y);
            }
        }
    }
}

void dequantize_iq2_xs(const void* src, float* dst, int64_t k) {
    const block_iq2_xs* x = static_cast<const block_iq2_xs*>(src);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float db[2] = {d * (0.5f + (x[i].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l) {
                const uint16_t q = x[i].qs[4 * ib + l];
                float* y = dst + i * QK_K + 32 * ib + 8 * l;
                put_signed(db[l / 2], grid_bytes(iq::iq2xs_grid, q & 511), iq::ksigns_iq2xs[q >> 9], 8, y);
            }
        }
    }
}

void dequantize_iq2_s(const void* src, float* dst, int64_t k) {
    const block_iq2_s* x = static_cast<const block_iq2_s*>(src);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const uint8_t* signs = x[i].qs + QK_K / 8;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const float db[2] = {d * (0.5f + (x[i].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l) {
                const int index = x[i].qs[4 * ib + l] | ((x[i].qh[ib] << (8 - 2 * l)) & 0x300);
                float* y = dst + i * QK_K + 32 * ib + 8 * l;
                put_signed(db[l / 2], grid_bytes(iq::iq2s_grid, index), signs[4 * ib + l], 8, y);
            }
        }
    }
}

void dequantize_iq3_xxs(const void* src, float* dst, int64_t k) {
    const block_iq3_xxs* x = static_cast<const block_iq3_xxs*>(src);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const uint8_t* qs = x[i].qs;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            uint32_t aux;
            memcpy(&aux, qs + QK_K / 4 + 4 * ib, sizeof(aux));
            const float db = d * (0.5f + (aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = iq::ksigns_iq2xs[(aux >> 7 * l) & 127];
                float* y = dst + i * QK_K + 32 * ib + 8 * l;
                put_signed(db, grid_bytes(iq::iq3xxs_grid, qs[8 * ib + 2 * l]), signs, 4, y);
                put_signed(db, grid_bytes(iq::iq3xxs_grid, qs[8 * ib + 2 * l + 1]), (uint8_t)(signs >> 4), 4, y + 4);
            }
        }
    }
}

void dequantize_iq3_s(const void* src, float* dst, int64_t k) {
    const block_iq3_s* x = static_cast<const block_iq3_s*>(src);
    for (int64_t i = 0; i < k / QK_K; ++i) {
        const float d = fp16_to_f32(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int ls = (x[i].scales[ib / 2] >> 4 * (ib % 2)) & 0xf;
            const float db = d * (1 + 2 * ls);
            const uint8_t* qs = x[i].qs + 8 * ib;
            const uint8_t qh = x[i].qh[ib];
            for (int l = 0; l < 4; ++l) {
                const int i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
                const int i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
                const uint8_t signs = x[i].signs[4 * ib + l];
                float* y = dst + i * QK_K + 32 * ib + 8 * l;
                put_signed(db, grid_bytes(iq::iq3s_grid, i1), signs, 4, y);
                put_signed(db, grid_bytes(iq::iq3s_grid, i2), (uint8_t)(signs >> 4), 4, y + 4);
            }
        }
    }
}

}  // namespace ref
}  // namespace lll
