// ref_iq_lattice.cpp — iq_lattice.h: the key -> grid point / nearest grid points maps of the
// low-bit i-quants, built from the generated grids (iq_grids_data.h) as ggml builds its own at
// ggml_quantize_init: the same keys, the same neighbour sets in the same order.
#include <float.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <utility>

#include "backends/cpu/quants/ref/iq_lattice.h"
#include "iq_grids_data.h"

namespace lll {
namespace ref {

namespace {

// Grid point j's bytes (little-endian words of `dims` bytes).
template <class Word>
std::vector<uint8_t> grid_bytes(const Word* grid, int size) {
    std::vector<uint8_t> out(size * sizeof(Word));
    memcpy(out.data(), grid, out.size());
    return out;
}

// Key of every lattice point is `bits` bits per coordinate: keys below kmap_size cover every
// coordinate at levels 0 .. 2^bits - 1 (ggml's kmap sizes: 43692 for IQ2_*, 4096 for IQ3_*).
IqLattice build(const std::vector<uint8_t>& bytes, int dims, int bits, int kmap_size, int nwant) {
    IqLattice lat;
    lat.dims = dims;
    lat.bits = bits;
    const int grid_size = (int)bytes.size() / dims;
    std::vector<uint8_t> levels(bytes);   // the distinct byte values, increasing: level l
    std::sort(levels.begin(), levels.end());
    levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
    lat.pos.resize(bytes.size());
    lat.map.assign(kmap_size, -1);
    for (int j = 0; j < grid_size; ++j) {
        uint32_t key = 0;
        for (int i = 0; i < dims; ++i) {
            const int l = (int)(std::lower_bound(levels.begin(), levels.end(), bytes[dims * j + i]) - levels.begin());
            lat.pos[dims * j + i] = (int8_t)(2 * l + 1);
            key |= (uint32_t)l << bits * i;
        }
        lat.map[key] = j;
    }
    std::vector<std::pair<int, int>> dist2(grid_size);
    const int mask = (1 << bits) - 1;
    for (int key = 0; key < kmap_size; ++key) {
        if (lat.map[key] >= 0) continue;
        for (int j = 0; j < grid_size; ++j) {
            int d2 = 0;
            for (int i = 0; i < dims; ++i) {
                const int diff = lat.pos[dims * j + i] - (2 * ((key >> bits * i) & mask) + 1);
                d2 += diff * diff;
            }
            dist2[j] = {d2, j};
        }
        std::sort(dist2.begin(), dist2.end());
        const size_t start = lat.neighbours.size();
        lat.map[key] = -(int32_t)(start + 1);
        lat.neighbours.push_back(0);
        int d2 = dist2[0].first, nhave = 1;
        for (const auto& [d, j] : dist2) {
            if (d > d2) {
                if (nhave == nwant) break;
                d2 = d;
                ++nhave;
            }
            lat.neighbours.push_back((uint16_t)j);
        }
        lat.neighbours[start] = (uint16_t)(lat.neighbours.size() - start - 1);
    }
    return lat;
}

}  // namespace

const IqLattice& iq_lattice(GGMLType type) {
    switch (type) {
        case GGMLType::IQ2_XXS: {
            static const IqLattice lat = build(grid_bytes(iq::iq2xxs_grid, 256), 8, 2, 43692, 2);
            return lat;
        }
        case GGMLType::IQ2_XS: {
            static const IqLattice lat = build(grid_bytes(iq::iq2xs_grid, 512), 8, 2, 43692, 2);
            return lat;
        }
        case GGMLType::IQ2_S: {
            static const IqLattice lat = build(grid_bytes(iq::iq2s_grid, 1024), 8, 2, 43692, 1);
            return lat;
        }
        case GGMLType::IQ3_XXS: {
            static const IqLattice lat = build(grid_bytes(iq::iq3xxs_grid, 256), 4, 3, 4096, 2);
            return lat;
        }
        case GGMLType::IQ3_S: {
            static const IqLattice lat = build(grid_bytes(iq::iq3s_grid, 512), 4, 3, 4096, 3);
            return lat;
        }
        default:
            throw std::invalid_argument("iq_lattice: not a low-bit i-quant type");
    }
}

int iq_best_neighbour(const IqLattice& lat, uint32_t key, const float* xval, const float* weight,
                      float scale, int8_t* L) {
    const uint16_t* nb = lat.neighbours_of(key);
    float best_d2 = FLT_MAX;
    int grid_index = nb[1];   // the list is never empty
    for (int j = 1; j <= nb[0]; ++j) {
        const int8_t* pg = lat.pos.data() + lat.dims * nb[j];
        float d2 = 0;
        for (int i = 0; i < lat.dims; ++i) {
            const float q = pg[i];
            const float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            grid_index = nb[j];
        }
    }
    const int8_t* pg = lat.pos.data() + lat.dims * grid_index;
    for (int i = 0; i < lat.dims; ++i) L[i] = (int8_t)((pg[i] - 1) / 2);
    return grid_index;
}

}  // namespace ref
}  // namespace lll
