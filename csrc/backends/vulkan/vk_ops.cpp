// vk_ops.cpp — launches of the kernels in vulkan/shaders/ (see vk_ops.h).
#ifdef LOCALLLM_HAVE_VULKAN
#include "backends/vulkan/vk_ops.h"

#include <algorithm>
#include <stdexcept>

namespace lll::vk {

namespace {

constexpr uint32_t kEltwiseGroup = 256;

// n workgroups laid over x (at most the device's limit) and y.
void spread_groups(const Context& c, uint64_t n, uint32_t* gx, uint32_t* gy) {
    const uint64_t max_x = std::min<uint32_t>(c.info().max_workgroup_count[0], 65535);
    *gx = (uint32_t)std::min<uint64_t>(n, max_x);
    *gy = (uint32_t)((n + max_x - 1) / max_x);
    if (n == 0) *gx = *gy = 0;
}

struct EltwisePush {
    uint32_t n, op, b_len;
    float s;
};

void eltwise(Context& c, uint32_t op, const Buffer& a, const Buffer& b, Buffer& out, uint32_t n, uint32_t b_len,
             float s) {
    const Pipeline& p = c.pipeline("eltwise", 3, sizeof(EltwisePush), {kEltwiseGroup});
    EltwisePush push{n, op, b_len ? b_len : 1, s};
    uint32_t gx, gy;
    spread_groups(c, (n + kEltwiseGroup - 1) / kEltwiseGroup, &gx, &gy);
    c.dispatch(p, {&a, &b, &out}, &push, gx, gy);
}

}  // namespace

void op_add(Context& c, const Buffer& a, const Buffer& b, Buffer& out, uint32_t n, uint32_t b_len) {
    eltwise(c, 0, a, b, out, n, b_len, 0.0f);
}

void op_scale(Context& c, const Buffer& a, Buffer& out, uint32_t n, float s) { eltwise(c, 1, a, a, out, n, 1, s); }

void op_glu(Context& c, Glu kind, const Buffer& gate, const Buffer& up, Buffer& out, uint32_t n) {
    eltwise(c, kind == Glu::SiLU ? 2 : 3, gate, up, out, n, n, 0.0f);
}

void op_rms_norm(Context& c, const Buffer& x, const Buffer* w, Buffer& y, uint32_t rows, uint32_t n, float eps) {
    struct {
        uint32_t rows, n;
        float eps;
        uint32_t has_w;
    } push{rows, n, eps, w ? 1u : 0u};
    const Pipeline& p = c.pipeline("rms_norm", 3, sizeof(push), {256});
    uint32_t gx, gy;
    spread_groups(c, rows, &gx, &gy);
    c.dispatch(p, {&x, w ? w : &x, &y}, &push, gx, gy);
}

void op_rope(Context& c, Buffer& x, const Buffer& cs, uint32_t T, uint32_t n_heads, uint32_t head_dim,
             uint32_t rope_dims, bool neox) {
    struct {
        uint32_t T, n_heads, head_dim, rope_dims, neox;
    } push{T, n_heads, head_dim, rope_dims, neox ? 1u : 0u};
    const Pipeline& p = c.pipeline("rope", 2, sizeof(push), {kEltwiseGroup});
    const uint64_t pairs = (uint64_t)T * n_heads * (rope_dims / 2);
    uint32_t gx, gy;
    spread_groups(c, (pairs + kEltwiseGroup - 1) / kEltwiseGroup, &gx, &gy);
    c.dispatch(p, {&x, &cs}, &push, gx, gy);
}

}  // namespace lll::vk
#endif  // LOCALLLM_HAVE_VULKAN
