// iq_lattice.h — the search structures the low-bit i-quant quantizers (ref_iq_quant.cpp) run on,
// built from the format's grids the way ggml's iq2xs_init_impl / iq3xs_init_impl build them.
//
// A grid point is `dims` coordinates (8 for IQ2_*, 4 for IQ3_*), each one of a few levels
// (3 for IQ2_*, 8 for IQ3_*): the grid's distinct byte values in increasing order. A point of
// the full level lattice is keyed by its levels, `bits` bits per coordinate (2 or 3). For every
// key the lattice index gives the grid point with exactly those levels or, for a key not on the
// grid, the grid points nearest to it in the coordinates 2 * level + 1: all points at the
// `nwant` smallest squared distances, ordered by (distance, grid index).
#pragma once
#include <stdint.h>

#include <vector>

#include "common/blocks.h"

namespace lll {
namespace ref {

struct IqLattice {
    int dims = 0;                  // coordinates per grid point
    int bits = 0;                  // bits per coordinate in a key
    std::vector<int8_t> pos;       // grid point j's coordinates 2 * level + 1: pos[dims * j + i]
    std::vector<int32_t> map;      // key -> grid index, or -(offset + 1) into neighbours
    std::vector<uint16_t> neighbours;   // at each offset: count, then that many grid indices

    // The grid point at `key`, or -1 when the key is not on the grid.
    int on_grid(uint32_t key) const { return map[key] >= 0 ? map[key] : -1; }
    // Neighbour list of an off-grid key: [count, index...].
    const uint16_t* neighbours_of(uint32_t key) const { return neighbours.data() - map[key] - 1; }
};

// The lattice of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS or IQ3_S, built on first use (thread-safe).
const IqLattice& iq_lattice(GGMLType type);

// The grid point nearest to xval (weighted by `weight`) at `scale` among the neighbours of an
// off-grid key; its levels go to L[0..dims). Returns its grid index (ggml's
// iq2_find_best_neighbour / iq3_find_best_neighbour).
int iq_best_neighbour(const IqLattice& lat, uint32_t key, const float* xval, const float* weight,
                      float scale, int8_t* L);

}  // namespace ref
}  // namespace lll
