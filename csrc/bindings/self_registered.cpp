// self_registered.cpp — the list behind self_registered.h. Compiled into each extension
// separately: each holds the registrations of the files linked into it.
#include "bindings/self_registered.h"

#include <utility>
#include <vector>

namespace lll {

namespace {
// A function-local static: registrations run during static initialization, in any file order.
std::vector<std::pair<BindingsModule, SelfRegisteredBindings::RegisterFn>>& registrations() {
    static std::vector<std::pair<BindingsModule, SelfRegisteredBindings::RegisterFn>> list;
    return list;
}
}  // namespace

SelfRegisteredBindings::SelfRegisteredBindings(BindingsModule module, RegisterFn fn) {
    registrations().emplace_back(module, fn);
}

void register_self_registered(BindingsModule module, pybind11::module_& m) {
    for (const auto& [mod, fn] : registrations())
        if (mod == module) fn(m);
}

}  // namespace lll
