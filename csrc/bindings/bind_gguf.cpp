// bind_gguf.cpp — Python face of the GGUF reader: GGUFFile, GGUFTensor, GGUFError.
//
// Conversions of metadata values to Python:
//   integers -> int, FLOAT32/FLOAT64 -> float, BOOL -> bool,
//   STRING -> str (UTF-8; bytes that are not valid UTF-8 come back as lone surrogates via
//            'surrogateescape', so s.encode('utf-8', 'surrogateescape') gives the file's bytes),
//   ARRAY of numbers or BOOL -> 1-D numpy array of the element's dtype (a copy),
//   ARRAY of STRING -> list[str], ARRAY of ARRAY -> list of the converted inner arrays.
// tensor_data(name) is a read-only numpy view into the mapping; the array's base holds the
// mapping alive after the GGUFFile object itself is gone.
#include <errno.h>
#include <string.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gguf/gguf.h"

namespace py = pybind11;
using lll::GGUFValue;
using lll::GGUFValueType;

namespace {

py::str decode_utf8(const char* s, size_t n) {
    PyObject* o = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(n), "surrogateescape");
    if (!o) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(o);
}

py::str decode_utf8(std::string_view s) { return decode_utf8(s.data(), s.size()); }

const char* numpy_dtype_of(GGUFValueType t) {
    switch (t) {
        case GGUFValueType::UINT8: return "<u1";
        case GGUFValueType::INT8: return "<i1";
        case GGUFValueType::UINT16: return "<u2";
        case GGUFValueType::INT16: return "<i2";
        case GGUFValueType::UINT32: return "<u4";
        case GGUFValueType::INT32: return "<i4";
        case GGUFValueType::FLOAT32: return "<f4";
        case GGUFValueType::BOOL: return "?";
        case GGUFValueType::UINT64: return "<u8";
        case GGUFValueType::INT64: return "<i8";
        case GGUFValueType::FLOAT64: return "<f8";
        default: return nullptr;
    }
}

py::object value_to_py(const GGUFValue& v) {
    switch (v.type) {
        case GGUFValueType::STRING: return decode_utf8(v.as_string());
        case GGUFValueType::BOOL: return py::bool_(v.as_bool());
        case GGUFValueType::FLOAT32:
        case GGUFValueType::FLOAT64: return py::float_(v.as_double());
        case GGUFValueType::UINT64: return py::int_(v.as_uint64());
        case GGUFValueType::ARRAY: break;
        default: return py::int_(v.as_int64());   // the other integer types all fit int64
    }
    if (v.elem_type == GGUFValueType::STRING) {
        py::list out(v.strings.size());
        for (size_t i = 0; i < v.strings.size(); ++i) out[i] = decode_utf8(v.strings[i]);
        return std::move(out);
    }
    if (v.elem_type == GGUFValueType::ARRAY) {
        py::list out(v.arrays.size());
        for (size_t i = 0; i < v.arrays.size(); ++i) out[i] = value_to_py(v.arrays[i]);
        return std::move(out);
    }
    // Fixed-size elements: one memcpy from the (possibly unaligned) file bytes into a new array.
    const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(v.count)};
    py::array arr(py::dtype(numpy_dtype_of(v.elem_type)), shape);
    if (v.raw_len) memcpy(arr.mutable_data(), v.raw, static_cast<size_t>(v.raw_len));
    return std::move(arr);
}

// The Python GGUFFile: the shared file plus the converted metadata dict, built on first use.
struct PyGGUFFile {
    std::shared_ptr<lll::GGUFFile> file;
    py::object metadata;   // None until first requested

    const lll::GGUFTensor& tensor(const std::string& name) const {
        const lll::GGUFTensor* t = file->tensor(name);
        if (!t) throw py::key_error("no tensor named '" + name + "' in " + file->path());
        return *t;
    }
};

py::dict metadata_dict(const lll::GGUFFile& f) {
    py::dict d;   // dicts keep insertion order: file order
    for (const lll::GGUFKeyValue& kv : f.metadata()) d[decode_utf8(kv.key)] = value_to_py(kv.value);
    return d;
}

// numpy dtype and shape of a tensor's view: typed for plain types gguf-py also types, raw bytes
// (uint8, last dim = bytes per row) for block-quantized types and BF16. Shape in numpy order.
std::pair<py::dtype, std::vector<py::ssize_t>> tensor_view_layout(const lll::GGUFTensor& t) {
    const char* typed = nullptr;
    switch (t.type) {
        case lll::GGMLType::F32: typed = "<f4"; break;
        case lll::GGMLType::F16: typed = "<f2"; break;
        case lll::GGMLType::F64: typed = "<f8"; break;
        case lll::GGMLType::I8: typed = "<i1"; break;
        case lll::GGMLType::I16: typed = "<i2"; break;
        case lll::GGMLType::I32: typed = "<i4"; break;
        case lll::GGMLType::I64: typed = "<i8"; break;
        default: break;
    }
    std::vector<py::ssize_t> shape;
    for (int d = t.n_dims - 1; d >= 0; --d) shape.push_back(static_cast<py::ssize_t>(t.ne[d]));
    if (typed) return {py::dtype(typed), shape};
    shape.back() = static_cast<py::ssize_t>(t.row_bytes());
    return {py::dtype("u1"), shape};
}

py::array tensor_view(const PyGGUFFile& self, const std::string& name) {
    const lll::GGUFTensor& t = self.tensor(name);
    auto layout = tensor_view_layout(t);
    // The capsule owns a reference to the file: the mapping outlives every view of it.
    auto* keep = new std::shared_ptr<lll::GGUFFile>(self.file);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<lll::GGUFFile>*>(p); });
    py::array arr(layout.first, layout.second, {}, static_cast<const void*>(t.data), owner);
    // The mapping is PROT_READ: a write would fault. numpy will not re-enable writing either,
    // since the base (a capsule) exposes no writable buffer.
    arr.attr("setflags")(py::arg("write") = false);
    return arr;
}

py::tuple tensor_shape(const lll::GGUFTensor& t) {
    py::tuple shape(t.n_dims);
    for (int d = 0; d < t.n_dims; ++d) shape[d] = py::int_(t.ne[d]);
    return shape;
}

void register_tensor_class(py::module_& m) {
    py::class_<lll::GGUFTensor>(m, "GGUFTensor", "One tensor info of a GGUF file (a copy; no data).")
        .def_readonly("name", &lll::GGUFTensor::name)
        .def_property_readonly("type", [](const lll::GGUFTensor& t) { return static_cast<uint32_t>(t.type); },
                               "ggml type id")
        .def_property_readonly("type_name", [](const lll::GGUFTensor& t) {
            return std::string(lll::type_traits(t.type)->name); })
        .def_readonly("n_dims", &lll::GGUFTensor::n_dims)
        .def_property_readonly("shape", &tensor_shape, "ggml order: shape[0] = ne[0] = row length")
        .def_readonly("offset", &lll::GGUFTensor::file_offset, "absolute byte offset in the file")
        .def_readonly("relative_offset", &lll::GGUFTensor::offset, "offset within the data section")
        .def_readonly("nbytes", &lll::GGUFTensor::nbytes)
        .def_property_readonly("n_elements", &lll::GGUFTensor::n_elements)
        .def("__repr__", [](const lll::GGUFTensor& t) {
            std::string s = "GGUFTensor('" + t.name + "', " + lll::type_traits(t.type)->name + ", [";
            for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
            return s + "], offset=" + std::to_string(t.file_offset) + ")";
        });
}


// The C++ typed getters, same semantics: without a default a missing key raises GGUFError.
template <class T, class Getter, class GetterDefault>
void bind_getter(py::class_<PyGGUFFile>& cls, const char* name, Getter get, GetterDefault get_or) {
    cls.def(name, [get, get_or](const PyGGUFFile& s, const std::string& key, py::object dflt) {
        if (dflt.is_none()) return (s.file.get()->*get)(key);
        return (s.file.get()->*get_or)(key, dflt.cast<T>());
    }, py::arg("key"), py::arg("default") = py::none());
}

void bind_typed_getters(py::class_<PyGGUFFile>& cls) {
    using F = lll::GGUFFile;
    bind_getter<std::string>(cls, "get_string",
                             static_cast<std::string (F::*)(const std::string&) const>(&F::get_string),
                             static_cast<std::string (F::*)(const std::string&, const std::string&) const>(&F::get_string));
    bind_getter<uint32_t>(cls, "get_u32", static_cast<uint32_t (F::*)(const std::string&) const>(&F::get_u32),
                          static_cast<uint32_t (F::*)(const std::string&, uint32_t) const>(&F::get_u32));
    bind_getter<uint64_t>(cls, "get_u64", static_cast<uint64_t (F::*)(const std::string&) const>(&F::get_u64),
                          static_cast<uint64_t (F::*)(const std::string&, uint64_t) const>(&F::get_u64));
    bind_getter<float>(cls, "get_f32", static_cast<float (F::*)(const std::string&) const>(&F::get_f32),
                       static_cast<float (F::*)(const std::string&, float) const>(&F::get_f32));
    cls.def("get_bool", [](const PyGGUFFile& s, const std::string& key, bool dflt) {
        return s.file->get_bool(key, dflt); }, py::arg("key"), py::arg("default"));
    cls.def("get_f32_array", [](const PyGGUFFile& s, const std::string& key) {
        return s.file->get_f32_array(key); }, py::arg("key"));
    cls.def("get_i32_array", [](const PyGGUFFile& s, const std::string& key) {
        return s.file->get_i32_array(key); }, py::arg("key"));
    cls.def("get_string_array", [](const PyGGUFFile& s, const std::string& key) {
        return s.file->get_string_array(key); }, py::arg("key"));
}

}  // namespace

void register_gguf(py::module_& m) {
    py::register_exception<lll::GGUFError>(m, "GGUFError", PyExc_ValueError);
    // OSError(errno, strerror, filename) becomes FileNotFoundError, PermissionError, ... itself.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const lll::GGUFOpenError& e) {
            const int err = e.code().value();
            const std::string reason = e.reason().empty() ? strerror(err) : e.reason();
            py::object exc = py::handle(PyExc_OSError)(err, reason, e.path());
            PyErr_SetObject(PyExc_OSError, exc.ptr());
        }
    });
    register_tensor_class(m);

    py::class_<PyGGUFFile> cls(m, "GGUFFile",
                           "A validated, memory-mapped GGUF file (v2/v3). Raises GGUFError on any\n"
                           "malformed content and OSError (FileNotFoundError, ...) when it cannot be\n"
                           "opened. Numeric metadata arrays come back as numpy arrays.");
    cls.def(py::init([](const py::object& path) {
                 std::string p = py::str(py::module_::import("os").attr("fsdecode")(path));
                 return PyGGUFFile{lll::GGUFFile::open(p), py::none()};
             }),
             py::arg("path"))
        .def_property_readonly("path", [](const PyGGUFFile& s) { return s.file->path(); })
        .def_property_readonly("version", [](const PyGGUFFile& s) { return s.file->version(); })
        .def_property_readonly("file_size", [](const PyGGUFFile& s) { return s.file->file_size(); })
        .def_property_readonly("alignment", [](const PyGGUFFile& s) { return s.file->alignment(); })
        .def_property_readonly("data_offset", [](const PyGGUFFile& s) { return s.file->data_offset(); })
        .def_property_readonly("metadata", [](PyGGUFFile& s) {
            if (s.metadata.is_none()) s.metadata = metadata_dict(*s.file);
            return s.metadata;
        }, "dict of all metadata in file order (built once, then shared: do not mutate)")
        .def("get", [](const PyGGUFFile& s, const std::string& key, py::object dflt) {
            const GGUFValue* v = s.file->find(key);
            return v ? value_to_py(*v) : dflt;
        }, py::arg("key"), py::arg("default") = py::none(), "one metadata value, converted alone")
        .def("__contains__", [](const PyGGUFFile& s, const std::string& key) { return s.file->has(key); })
        .def("keys", [](const PyGGUFFile& s) {
            py::list keys;
            for (const auto& kv : s.file->metadata()) keys.append(decode_utf8(kv.key));
            return keys;
        })
        .def("value_type", [](const PyGGUFFile& s, const std::string& key) {
            const GGUFValue* v = s.file->find(key);
            if (!v) throw py::key_error("no metadata key '" + key + "'");
            return v->type_string();
        }, py::arg("key"), "GGUF type of a value: 'UINT32', 'STRING', 'ARRAY[FLOAT32]', ...");
    bind_typed_getters(cls);
    cls.def_property_readonly("tensors", [](const PyGGUFFile& s) { return s.file->tensors(); },
                               "list of GGUFTensor in file order")
        .def("tensor", [](const PyGGUFFile& s, const std::string& name) { return s.tensor(name); },
             py::arg("name"), "the GGUFTensor named name (KeyError if absent)")
        .def("tensor_data", &tensor_view, py::arg("name"),
             "read-only zero-copy numpy view of a tensor's bytes, numpy order (reversed ggml ne):\n"
             "float32/float16/float64/int* for plain types, uint8 rows of raw blocks otherwise")
        .def("__repr__", [](const PyGGUFFile& s) {
            return "GGUFFile('" + s.file->path() + "', v" + std::to_string(s.file->version()) + ", " +
                   std::to_string(s.file->metadata().size()) + " keys, " +
                   std::to_string(s.file->tensors().size()) + " tensors)";
        });
}
