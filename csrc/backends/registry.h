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
    // The backend of one placement; null where !compiled.
    std::unique_ptr<Backend> (*make)(const BackendConfig& cfg);
    // The bytes its allocators will ask for (the planner's rule; known without the device, so
    // a plan can be made for a build or machine that lacks it): weights placed on it, scratch
    // for batches of up to T tokens.
    WeightsScratchBytes (*footprint)(const HParams& hp, const PlacedWeights& pw, int64_t T, Isa isa,
                                     Numerics numerics);
    // Devices and memory now (0 without a device, a driver or the compiled code); null for the host.
    int (*device_count)();
    size_t (*free_memory)();   // free bytes of device 0, what -ngl auto plans against
    // Null where !compiled: the name of a device, and (free, total) bytes of the current one.
    std::string (*device_name)(int device);
    void (*mem_info)(size_t* free_bytes, size_t* total_bytes);
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
// Where -ngl offloads layers to: the backend set_offload_device named; else the first non-host
// backend this build has with a device now (table order: CUDA before Vulkan), else the first
// non-host one known (so that asking for it explains that this build lacks it or has no device).
Placement offload_placement();
// Names the backend -ngl offloads to ("" = the automatic choice above). Process-wide: read when
// a model places its layers (the Python LLM sets it from device=). invalid_argument for a name
// that is not a device backend.
void set_offload_device(const std::string& name);
const std::string& offload_device_named();

// The backend of a placement; an error naming the cause where this build lacks it.
std::unique_ptr<Backend> make_backend(Placement p, const BackendConfig& cfg);
// Whether make_backend(p) can succeed in this build (a device may still be absent).
bool backend_compiled(Placement p);

}  // namespace lll
