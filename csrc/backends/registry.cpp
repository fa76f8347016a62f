// registry.cpp — the table of registry.h. Adding a backend: its folder csrc/backends/<name>/ with a
// register.cpp defining <name>_backend_info(), and its name in LLL_BACKENDS below.
#include "backends/registry.h"

#include <stdexcept>

#include "backends/backend.h"

// The known backends, the host's first. One X(name) per backend, defined in
// csrc/backends/<name>/register.cpp.
#define LLL_BACKENDS(X) \
    X(cpu)              \
    X(cuda)             \
    X(vulkan)

namespace lll {

#define LLL_DECLARE_BACKEND(name) const BackendInfo& name##_backend_info();
LLL_BACKENDS(LLL_DECLARE_BACKEND)
#undef LLL_DECLARE_BACKEND

const std::vector<const BackendInfo*>& backend_registry() {
#define LLL_LIST_BACKEND(name) &name##_backend_info(),
    static const std::vector<const BackendInfo*> all{LLL_BACKENDS(LLL_LIST_BACKEND)};
#undef LLL_LIST_BACKEND
    return all;
}

const BackendInfo& backend_info(Placement p) {
    const auto& all = backend_registry();
    if (p.backend < 0 || (size_t)p.backend >= all.size())
        throw std::logic_error("placement of unknown backend " + std::to_string(p.backend));
    return *all[p.backend];
}

const char* placement_name(Placement p) { return backend_info(p).name; }

Placement find_placement(const std::string& name) {
    const auto& all = backend_registry();
    for (size_t i = 0; i < all.size(); ++i)
        if (name == all[i]->name) return Placement{(int16_t)i, 0};
    return Placement{-1, 0};
}

std::string backend_names() {
    const auto& all = backend_registry();
    std::string s;
    for (size_t i = 0; i < all.size(); ++i) {
        if (i > 0) s += i + 1 == all.size() ? " or " : ", ";
        s += std::string("'") + all[i]->name + "'";
    }
    return s;
}

namespace {
std::string g_offload_device;   // set_offload_device's name, "" for the automatic choice
}

void set_offload_device(const std::string& name) {
    if (!name.empty()) {
        const Placement p = find_placement(name);
        if (p.backend < 0 || backend_info(p).host)
            throw std::invalid_argument("no device backend called '" + name + "' (known: " + backend_names() + ")");
    }
    g_offload_device = name;
}

const std::string& offload_device_named() { return g_offload_device; }

Placement offload_placement() {
    if (!g_offload_device.empty()) return find_placement(g_offload_device);
    const auto& all = backend_registry();
    int first_known = -1;
    for (size_t i = 0; i < all.size(); ++i) {
        if (all[i]->host) continue;
        if (all[i]->compiled && all[i]->device_count() > 0) return Placement{(int16_t)i, 0};
        if (first_known < 0) first_known = (int)i;
    }
    if (first_known < 0) throw std::logic_error("no backend to offload layers to is registered");
    return Placement{(int16_t)first_known, 0};
}

bool backend_compiled(Placement p) { return backend_info(p).compiled; }

std::unique_ptr<Backend> make_backend(Placement p, const BackendConfig& cfg) {
    const BackendInfo& info = backend_info(p);
    if (!info.compiled)
        throw std::invalid_argument(std::string("this build of localllm has no ") + info.name +
                                    " backend: run with -ngl 0 (--device cpu)");
    BackendConfig own = cfg;
    own.placement = p;
    return info.make(own);
}

}  // namespace lll
