// ggml_rounding.h — the rounding the reference quantizers share with ggml-quants.c, so that their
// scale searches pick ggml's scales and write its bytes.
#pragma once
#include <stdint.h>
#include <string.h>

namespace lll::ref {

// ggml's nearest_int: round half to even through the 1.5 * 2^23 bias. Valid for |v| <= 2^22 - 1;
// outside that it returns the same garbage ggml does.
inline int nearest_int(float v) {
    const float biased = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &biased, sizeof(bits));
    return (bits & 0x007fffff) - 0x00400000;
}

// Below this a group's largest magnitude counts as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

}  // namespace lll::ref
