// bind_sampling.cpp — Python bindings for the token sampler (localllm._core.Sampler).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <random>
#include <string>

#include "sampling/sampling.h"

namespace py = pybind11;

namespace {

// logit_bias from a {token: bias} mapping or an iterable of (token, bias) pairs.
std::vector<std::pair<int, float>> to_logit_bias(const py::object& obj) {
    std::vector<std::pair<int, float>> out;
    if (obj.is_none()) return out;
    try {
        if (py::isinstance<py::dict>(obj)) {
            for (auto item : py::reinterpret_borrow<py::dict>(obj))
                out.emplace_back(item.first.cast<int>(), item.second.cast<float>());
        } else {
            for (auto item : obj) {
                auto pair = item.cast<py::sequence>();
                if (pair.size() != 2) throw py::cast_error("not a pair");
                out.emplace_back(pair[0].cast<int>(), pair[1].cast<float>());
            }
        }
    } catch (const py::error_already_set&) {
        throw py::value_error("sampling parameter logit_bias must map int token ids to float biases");
    } catch (const py::cast_error&) {
        throw py::value_error("sampling parameter logit_bias must map int token ids to float biases");
    }
    return out;
}

// seed: None -> drawn from std::random_device; else an int in [0, 2**64).
uint64_t to_seed(const py::object& obj) {
    if (obj.is_none()) {
        std::random_device device;
        return (static_cast<uint64_t>(device()) << 32) | device();
    }
    if (!py::isinstance<py::int_>(obj) || py::isinstance<py::bool_>(obj))
        throw py::value_error("sampling parameter seed must be an int or None");
    const py::int_ value = py::reinterpret_borrow<py::int_>(obj);
    if (value < py::int_(0) || value >= py::int_(py::module_::import("builtins").attr("pow")(2, 64)))
        throw py::value_error("sampling parameter seed must be in [0, 2**64)");
    return value.cast<uint64_t>();
}

using MaskArray = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>;

// The bitmask argument `allowed` (None, or uint32[ceil(n_vocab / 32)]) as a pointer; the array
// is held by `keep` while the pointer is used (a forcecast copy lives there).
const uint32_t* mask_pointer(const lll::Sampler& s, const py::object& allowed, MaskArray& keep, const char* what) {
    if (allowed.is_none()) return nullptr;
    keep = MaskArray::ensure(allowed);
    if (!keep || keep.ndim() != 1 || keep.shape(0) != lll::mask_words(s.n_vocab()))
        throw py::value_error(std::string("Sampler.") + what + ": allowed must be a 1-D uint32 bitmask of " +
                              std::to_string(lll::mask_words(s.n_vocab())) + " words (ceil(n_vocab / 32))");
    return keep.data();
}

void check_row(const lll::Sampler& s, const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
               const char* what) {
    if (logits.ndim() != 1 || logits.shape(0) != s.n_vocab())
        throw py::value_error(std::string("Sampler.") + what + ": logits must be a 1-D array of n_vocab=" +
                              std::to_string(s.n_vocab()) + " floats");
}

py::tuple last_logprobs(const lll::Sampler& s) {
    if (!s.has_logprobs())
        throw std::runtime_error(
            "Sampler.last_logprobs: no logprobs (sample() has not run yet, or n_logprobs is -1)");
    py::list top;
    for (const lll::TokenLogprob& t : s.last_top_logprobs()) top.append(py::make_tuple(t.token, t.logprob));
    return py::make_tuple(s.last_logprob(), top);
}

}  // namespace

void register_sampling(py::module_& m) {
    py::class_<lll::Sampler>(m, "Sampler", R"doc(
Token sampler following llama.cpp's default chain: logit bias -> repeat/frequency/presence
penalties (over the last penalty_last_n accepted tokens) -> top-k -> top-p -> min-p ->
temperature -> seeded categorical draw. temperature <= 0 is greedy (argmax, ties -> lowest id).
top_k=0, top_p=1, min_p=0, repeat_penalty=1 disable those steps; penalty_last_n=-1 uses every
accepted token. n_logprobs: -1 none, 0 chosen token only, n also the top n (log-softmax of the
logits after logit bias). seed=None draws a random seed (see .seed).)doc")
        .def(py::init([](int n_vocab, float temperature, int top_k, float top_p, float min_p,
                         float repeat_penalty, float presence_penalty, float frequency_penalty,
                         int penalty_last_n, const py::object& logit_bias, const py::object& seed,
                         int n_logprobs) {
                 lll::SamplingParams p;
                 p.temperature = temperature;
                 p.top_k = top_k;
                 p.top_p = top_p;
                 p.min_p = min_p;
                 p.repeat_penalty = repeat_penalty;
                 p.presence_penalty = presence_penalty;
                 p.frequency_penalty = frequency_penalty;
                 p.penalty_last_n = penalty_last_n;
                 p.logit_bias = to_logit_bias(logit_bias);
                 p.seed = to_seed(seed);
                 p.n_logprobs = n_logprobs;
                 return new lll::Sampler(p, n_vocab);
             }),
             py::kw_only(), py::arg("n_vocab"), py::arg("temperature") = 0.8f, py::arg("top_k") = 40,
             py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f, py::arg("repeat_penalty") = 1.0f,
             py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f,
             py::arg("penalty_last_n") = 64, py::arg("logit_bias") = py::none(),
             py::arg("seed") = py::none(), py::arg("n_logprobs") = 0)
        .def("sample",
             [](lll::Sampler& s, const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
                const py::object& allowed) {
                 if (logits.ndim() != 1 || logits.shape(0) != s.n_vocab())
                     throw py::value_error("Sampler.sample: logits must be a 1-D array of n_vocab=" +
                                           std::to_string(s.n_vocab()) + " floats");
                 MaskArray keep;
                 const uint32_t* mask = mask_pointer(s, allowed, keep, "sample");
                 const float* row = logits.data();
                 py::gil_scoped_release release;
                 return s.sample(row, mask);
             },
             py::arg("logits"), py::arg("allowed") = py::none(),
             "Pick the next token id from logits f32[n_vocab] (does not accept() it); allowed: None or "
             "a uint32 token bitmask (bit t % 32 of word t / 32: token t may be drawn).")
        .def("distribution",
             [](lll::Sampler& s, const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
                const py::object& allowed) {
                 check_row(s, logits, "distribution");
                 MaskArray keep;
                 const uint32_t* mask = mask_pointer(s, allowed, keep, "distribution");
                 std::vector<std::pair<int, double>> dist;
                 {
                     py::gil_scoped_release release;
                     dist = s.distribution(logits.data(), mask);
                 }
                 py::array_t<int32_t> tokens(static_cast<py::ssize_t>(dist.size()));
                 py::array_t<double> probs(static_cast<py::ssize_t>(dist.size()));
                 for (size_t i = 0; i < dist.size(); ++i) {
                     tokens.mutable_at(i) = dist[i].first;
                     probs.mutable_at(i) = dist[i].second;
                 }
                 return py::make_tuple(tokens, probs);
             },
             py::arg("logits"), py::arg("allowed") = py::none(),
             "(tokens int32[m], probs float64[m]): the distribution sample() draws from for this row "
             "(after bias, penalties, truncation, temperature); no randomness used.")
        .def("verify",
             [](lll::Sampler& s, const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
                int draft, const py::object& q, const py::object& allowed) {
                 check_row(s, logits, "verify");
                 MaskArray keep;
                 const uint32_t* mask = mask_pointer(s, allowed, keep, "verify");
                 std::vector<std::pair<int, float>> proposal;
                 try {
                     proposal = to_logit_bias(q);
                 } catch (const py::value_error&) {
                     throw py::value_error("Sampler.verify: q must map int token ids to float probabilities");
                 }
                 py::gil_scoped_release release;
                 return s.verify(logits.data(), draft, proposal, mask);
             },
             py::arg("logits"), py::arg("draft"), py::arg("q") = py::none(), py::arg("allowed") = py::none(),
             "Speculative decoding's rejection rule for one drafted token: (token, accepted). "
             "Keeps draft with probability min(1, p(draft)/q(draft)), else draws from "
             "norm(max(0, p - q)); p is distribution(logits). q: {token: probability} of the "
             "proposal, None for a point mass on draft. Does not accept() the token.")
        .def("accept", &lll::Sampler::accept, py::arg("token"),
             "Add a token to the penalty history.")
        .def("reset", &lll::Sampler::reset, "Clear the penalty history and reseed with .seed.")
        .def("last_logprobs", &last_logprobs,
             "(logprob of the last sampled token, [(token, logprob)] of the n_logprobs best).")
        .def_property_readonly("n_vocab", &lll::Sampler::n_vocab)
        .def_property_readonly("seed", [](const lll::Sampler& s) { return s.params().seed; })
        .def_property_readonly("temperature", [](const lll::Sampler& s) { return s.params().temperature; })
        .def_property_readonly("top_k", [](const lll::Sampler& s) { return s.params().top_k; })
        .def_property_readonly("top_p", [](const lll::Sampler& s) { return s.params().top_p; })
        .def_property_readonly("min_p", [](const lll::Sampler& s) { return s.params().min_p; })
        .def_property_readonly("n_logprobs", [](const lll::Sampler& s) { return s.params().n_logprobs; })
        .def("__repr__", [](const lll::Sampler& s) {
            const lll::SamplingParams& p = s.params();
            return "Sampler(n_vocab=" + std::to_string(s.n_vocab()) + ", temperature=" +
                   std::to_string(p.temperature) + ", top_k=" + std::to_string(p.top_k) +
                   ", top_p=" + std::to_string(p.top_p) + ", min_p=" + std::to_string(p.min_p) +
                   ", seed=" + std::to_string(p.seed) + ")";
        });
}
