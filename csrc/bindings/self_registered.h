// self_registered.h — bindings that a backend's folder registers itself, so neither extension
// module lists a backend: a file under csrc/backends/<name>/ (product bindings, built into
// _core) or csrc/backends/<name>/harness/ (op harness, built into _harness) defines one
//     const lll::SelfRegisteredBindings kX(lll::BindingsModule::Core, &register_x);
// and the module calls register_self_registered() once.
#pragma once
#include <pybind11/pybind11.h>

namespace lll {

enum class BindingsModule : int { Core = 0, Harness = 1 };

struct SelfRegisteredBindings {
    using RegisterFn = void (*)(pybind11::module_& m);
    SelfRegisteredBindings(BindingsModule module, RegisterFn fn);
};

// Runs every registration of `module` linked into this extension, in link order.
void register_self_registered(BindingsModule module, pybind11::module_& m);

}  // namespace lll
