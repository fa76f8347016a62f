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

// The automatic choice of resolve_offload.
Placement automatic_offload() {
    const auto& all = backend_registry();
    int first_known = -1;
    for (size_t i = 0; i < all.size(); ++i) {
        if (all[i]->host) continue;
        if (all[i]->compiled) {
            const int d = all[i]->default_device(false);
            if (d >= 0) return Placement{(int16_t)i, (int16_t)d};
        }
        if (first_known < 0) first_known = (int)i;
    }
    if (first_known < 0) throw std::logic_error("no backend to offload layers to is registered");
    return Placement{(int16_t)first_known, -1};
}

}  // namespace

Placement resolve_offload(const std::string& spec) {
    if (spec.empty()) return automatic_offload();
    const size_t colon = spec.find(':');
    const std::string name = spec.substr(0, colon);
    const Placement p = find_placement(name);
    if (p.backend < 0 || backend_info(p).host)
        throw std::invalid_argument("no device backend called '" + name + "' (known: " + backend_names() + ")");
    const BackendInfo& info = backend_info(p);
    if (colon == std::string::npos)
        return Placement{p.backend, (int16_t)(info.compiled ? info.default_device(true) : -1)};
    const std::string num = spec.substr(colon + 1);
    if (num.empty() || num.size() > 4 || num.find_first_not_of("0123456789") != std::string::npos)
        throw std::invalid_argument("device '" + spec + "': the part after ':' must be a device number");
    return Placement{p.backend, (int16_t)std::stoi(num)};
}

std::string placement_spec(Placement p) {
    return std::string(placement_name(p)) + (p.device >= 0 ? ":" + std::to_string(p.device) : "");
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
