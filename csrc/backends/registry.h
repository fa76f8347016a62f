// registry.h — the backends this runtime knows, in one table: the one place a device is named.
//
// Each backend registers itself from its own folder (csrc/backends/<name>/register.cpp defines
// `const BackendInfo& <name>_backend_info()`) and is listed once, by one line of LLL_BACKENDS in
// registry.cpp. Everything else — placing layers, making a layer's backend, the planner's bytes,
// the device strings and device queries of the Python bindings — reads this table, so the core
// names no device. A backend whose code this build lacks is still listed (compiled = false): its
// name is a device a user may ask for, and the answer is an error naming the cause.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <vector>

#include "model/tensor.h"

namespace lll {

class Backend;
struct BackendConfig;
struct HParams;
struct PlacedWeights;
enum class Isa : int;
enum class Numerics : int;

// What a backend allocates for one placement (model/footprint.h's DeviceBytes, without KV).
struct WeightsScratchBytes {
    size_t weights = 0, scratch = 0;
};

struct BackendInfo {
    const char* name;   // the device string ("CPU", ...): Model.allocated's keys, layer_devices
    bool compiled;      // this build has its code (a device may still be absent at run time)
    bool host;          // runs on host memory with the CPU's kernels (the KV the host reads)
    // Its kv_write and attention take a cache with a quantized side (q8_0 / q4_0,
    // model/kv_cache.h); false: F16 sides only (the model refuses such a layer, -ngl auto keeps
    // the cache on the host).
    bool quantized_kv;
    // The backend of one placement; null where !compiled.
    std::unique_ptr<Backend> (*make)(const BackendConfig& cfg);
    // The bytes its allocators will ask for (the planner's rule; known without the device, so
    // a plan can be made for a build or machine that lacks it): weights placed on it, scratch
    // for batches of up to T tokens.
    WeightsScratchBytes (*footprint)(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa,
                                     Numerics numerics);
    // Devices now (0 without a device, a driver or the compiled code); null for the host. Devices
    // are numbered 0..n-1 in the backend's own order (CUDA's ordinals, `_core.vulkan_devices()`).
    int (*device_count)();
    // The device a placement gets when the user names the backend without a number (named) or for
    // the automatic choice (!named); -1 where there is none it may use.
    int (*default_device)(bool named);
    // Null where !compiled: the name of a device, and its (free, total) bytes.
    std::string (*device_name)(int device);
    void (*mem_info)(int device, size_t* free_bytes, size_t* total_bytes);
};

// Every known backend, the host's first (index = Placement::backend).
const std::vector<const BackendInfo*>& backend_registry();
const BackendInfo& backend_info(Placement p);
// The placement of a device string (its backend's name; device 0); -1 backend where none is called so.
Placement find_placement(const std::string& name);
// The known device strings as "'A', 'B' or 'C'" (for error messages).
std::string backend_names();

// Where layers run unless offloaded: the host (the CPU backend).
constexpr Placement kHostPlacement{};
// Where -ngl offloads layers to, from a device string: "" for the automatic choice (the first
// non-host backend this build has with a device it may choose by itself: table order, CUDA before
// Vulkan; else the first non-host one known, so that using it explains that this build lacks it
// or has no device), or a device backend's name with an optional device number ("Vulkan",
// "Vulkan:1", "CUDA:0"; the name alone: that backend's default device when named). The device is
// -1 where the backend has none to give; make_backend then says why. invalid_argument for a string
// that names no device backend or a bad number.
Placement resolve_offload(const std::string& spec);
// The device string of a placement: "Vulkan:1".
std::string placement_spec(Placement p);

// The backend of a placement; an error naming the cause where this build lacks it.
std::unique_ptr<Backend> make_backend(Placement p, const BackendConfig& cfg);
// Whether make_backend(p) can succeed in this build (a device may still be absent).
bool backend_compiled(Placement p);

}  // namespace lll
