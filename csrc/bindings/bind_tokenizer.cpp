// bind_tokenizer.cpp — Python bindings for byte-level BPE merging (localllm._core.BpeMerges).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "text/bpe.h"

namespace py = pybind11;

namespace {

// UTF-8 of a Python str; lone surrogates (GGUF texts that were not valid UTF-8) pass through as
// the tokenizer's own encode("utf-8", "surrogatepass") writes them.
std::string utf8_of(const py::handle& s, const char* what) {
    if (!PyUnicode_Check(s.ptr())) throw py::type_error(std::string(what) + " must hold only strings");
    Py_ssize_t n = 0;
    if (const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n)) return std::string(p, (size_t)n);
    PyErr_Clear();
    const py::object b = py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(s.ptr(), "utf-8", "surrogatepass"));
    if (!b) throw py::error_already_set();
    return std::string(PyBytes_AS_STRING(b.ptr()), (size_t)PyBytes_GET_SIZE(b.ptr()));
}

std::vector<std::string> utf8_list(const py::list& items, const char* what) {
    std::vector<std::string> out;
    out.reserve(items.size());
    for (const py::handle item : items) out.push_back(utf8_of(item, what));
    return out;
}

}  // namespace

void register_tokenizer(py::module_& m) {
    using lll::BpeMerges;
    py::class_<BpeMerges>(m, "BpeMerges",
                          "Byte-level BPE merges of a GGUF vocabulary (llama.cpp's rule: lowest rank first, leftmost on ties).")
        .def(py::init([](const py::list& tokens, const py::list& merges, bool ignore_merges) {
                 const std::vector<std::string> t = utf8_list(tokens, "tokenizer.ggml.tokens");
                 const std::vector<std::string> mg = utf8_list(merges, "tokenizer.ggml.merges");
                 py::gil_scoped_release release;
                 return new BpeMerges(t, mg, ignore_merges);
             }),
             py::arg("tokens"), py::arg("merges"), py::arg("ignore_merges"))
        .def("encode_words", [](const BpeMerges& b, const py::list& words) {
                 const std::vector<std::string> w = utf8_list(words, "words");
                 std::vector<int32_t> ids;
                 b.encode_words(w, ids);
                 return ids;
             }, py::arg("words"), "Concatenated ids of the byte-level words, each merged on its own.")
        .def("token_id", [](const BpeMerges& b, const py::str& text) -> py::object {
                 const int32_t id = b.token_id(utf8_of(text, "text"));
                 return id < 0 ? py::object(py::none()) : py::object(py::int_(id));
             }, py::arg("text"), "Id of the token whose text is exactly `text`, else None.")
        .def_property_readonly("n_merges", &BpeMerges::n_merges, "Usable merges (pairs of tokens forming a token).");
}
