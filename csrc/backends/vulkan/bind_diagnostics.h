// bind_diagnostics.h — the Vulkan instance's diagnostics, bound in each extension module that
// creates an instance of its own (_core for the backend, _harness for the op harness: each module
// links its own copy of the core, so each has its own instance and validation log).
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <string>

#include "backends/vulkan/vk_instance.h"
#include "backends/vulkan/vk_recording.h"

inline void bind_vulkan_diagnostics(pybind11::module_& m) {
    namespace py = pybind11;
    m.def("vulkan_unavailable_reason", [] {
        std::string why;
        return lll::vk::Instance::try_get(&why) ? std::string() : why;
    }, "Why Vulkan cannot be used here ('' when an instance was created).");
    m.def("vulkan_validation_messages", [] {
        auto& log = lll::vk::validation_log();
        std::lock_guard<std::mutex> lock(log.mu);
        return py::make_tuple(log.count.load(), log.first);
    }, "(count, first messages) of validation-layer warnings and errors since start "
       "(LOCALLLM_VULKAN_VALIDATE=1 enables the layer).");
    m.def("vulkan_command_stats", [](bool reset) {
        lll::vk::CommandStats& s = lll::vk::command_stats();
        py::dict d;
        d["submits"] = s.submits;
        d["recordings"] = s.recordings;
        d["replays"] = s.replays;
        d["dispatches"] = s.dispatches;
        d["largest_submit"] = s.largest_submit;
        d["record_cpu_s"] = s.record_cpu_s;
        d["waits"] = s.waits;
        d["queued_behind"] = s.queued_behind;
        d["work_s"] = s.work_s;
        d["largest_submit_s"] = s.largest_submit_s;
        d["largest_op_s"] = s.largest_op_s;
        if (reset) s = lll::vk::CommandStats{};
        return d;
    }, py::arg("reset") = false,
       "What this module's Vulkan submissions did since start (or the last reset): submits, recordings "
       "(command buffers recorded), replays (kept command buffers resubmitted unrecorded), dispatches, "
       "largest_submit (the most dispatches in one submission), record_cpu_s (CPU time spent recording "
       "command buffers), waits (times the host waited for queued submissions), queued_behind (submissions "
       "queued while an earlier one still ran), work_s, largest_submit_s and largest_op_s (estimated work: "
       "seconds of a slow integrated GPU, all submissions, the largest one, the largest op). "
       "reset=True zeroes them after reading.");
    m.def("vulkan_validating", [] {
        lll::vk::Instance* inst = lll::vk::Instance::try_get(nullptr);
        return inst && inst->validating();
    }, "Whether the validation layer is on for this process's Vulkan instance.");
}
