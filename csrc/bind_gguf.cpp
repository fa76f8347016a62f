// bind_gguf.cpp — Python bindings for this area (filled in by the area's owner).
#include <pybind11/pybind11.h>
namespace py = pybind11;
void register_gguf(py::module_& m) { (void)m; }
