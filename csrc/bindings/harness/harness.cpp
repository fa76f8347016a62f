// harness.cpp — the argument checks and shared pools of harness.h.
#include "bindings/harness/harness.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace lll {
namespace harness {

SharedPool& shared_pool(int n_threads) {
    if (n_threads < 1 || n_threads > 256)
        throw std::invalid_argument("n_threads must be in 1..256, got " + std::to_string(n_threads));
    static std::mutex mu;
    static std::map<int, std::unique_ptr<SharedPool>> pools;
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = pools[n_threads];
    if (!slot) slot.reset(new SharedPool(n_threads));
    return *slot;
}

Isa isa_from_int(int isa, bool allow_best) {
    if (allow_best && isa == -1) return best_isa();
    if (isa < 0 || isa >= kIsaLevels)
        throw std::invalid_argument("isa must be 0 (scalar), 1 (avx2), 2 (avx512), 3 (neon), 4 (dotprod) or 5 (i8mm), got " +
                                    std::to_string(isa));
    const Isa level = static_cast<Isa>(isa);
    if (!isa_available(level))
        throw std::invalid_argument(std::string("ISA level ") + isa_name(level) + " is not available on this CPU/build");
    return level;
}

const TypeTraits& traits_from_int(int type) {
    const TypeTraits* tt = type >= 0 ? type_traits((uint32_t)type) : nullptr;
    if (!tt) throw std::invalid_argument("unknown ggml type id " + std::to_string(type));
    return *tt;
}

// Bytes of one row of n elements of this type; n must be a positive multiple of the block size.
int64_t row_bytes(const TypeTraits& tt, int64_t n) {
    if (n <= 0 || n % tt.block_elems != 0)
        throw std::invalid_argument(std::string("n = ") + std::to_string(n) + " is not a positive multiple of the " +
                                    tt.name + " block size " + std::to_string(tt.block_elems));
    return n / tt.block_elems * tt.block_bytes;
}

U8Array raw_bytes(const py::array& a, const char* what) {
    if (a.dtype().kind() != 'u' || a.itemsize() != 1)
        throw std::invalid_argument(std::string(what) + " must be a uint8 array of raw block bytes");
    return U8Array::ensure(a);
}

}  // namespace harness
}  // namespace lll
