// runtime.cu — devices, memory, streams and events of the C API (cuda_api.h), and its errors.
#include <stdio.h>
#include <string.h>
#include "common.cuh"

namespace lll {
namespace cuda {

static thread_local std::string g_last_error;

llc_status fail(llc_status status, const std::string& msg) {
    g_last_error = "cuda: " + msg;
    return status;
}

llc_status from_cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return LLC_OK;
    cudaGetLastError();   // clear a non-sticky error so the next call does not report it again
    const llc_status st = e == cudaErrorMemoryAllocation                                   ? LLC_OUT_OF_MEMORY
                          : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? LLC_NO_DEVICE
                                                                                         : LLC_CUDA_ERROR;
    return fail(st, std::string(what) + ": " + cudaGetErrorString(e));
}

static std::string mib(size_t bytes) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

}  // namespace cuda
}  // namespace lll

using lll::cuda::fail;
using lll::cuda::from_cuda;

extern "C" {

const char* llc_last_error(void) { return lll::cuda::g_last_error.c_str(); }

int llc_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

llc_status llc_device_name(int device, char* buf, size_t buf_len) {
    LLC_REQUIRE(buf && buf_len > 0, "device_name: no buffer");
    cudaDeviceProp p;
    if (llc_status st = from_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties")) return st;
    snprintf(buf, buf_len, "%s", p.name);
    return LLC_OK;
}

llc_status llc_set_device(int device) { return from_cuda(cudaSetDevice(device), "cudaSetDevice"); }

llc_status llc_mem_info(size_t* free_bytes, size_t* total_bytes) {
    return from_cuda(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

llc_status llc_malloc(void** ptr, size_t bytes, const char* what) {
    LLC_REQUIRE(ptr, "malloc: no pointer to fill");
    *ptr = nullptr;
    const cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaSuccess) return LLC_OK;
    if (e != cudaErrorMemoryAllocation) return from_cuda(e, "cudaMalloc");
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return fail(LLC_OUT_OF_MEMORY, "GPU out of memory: " + lll::cuda::mib(bytes) + " for " +
                                       (what && *what ? what : "an unnamed buffer") + " did not fit (" +
                                       lll::cuda::mib(free_b) + " free of " + lll::cuda::mib(total_b) + ")");
}

llc_status llc_free(void* ptr) { return from_cuda(cudaFree(ptr), "cudaFree"); }

llc_status llc_memcpy_h2d(void* dst, const void* src, size_t bytes, llc_stream s) {
    return from_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "copy host to device");
}

llc_status llc_memcpy_d2h(void* dst, const void* src, size_t bytes, llc_stream s) {
    return from_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "copy device to host");
}

llc_status llc_memcpy_d2d(void* dst, const void* src, size_t bytes, llc_stream s) {
    return from_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copy device to device");
}

llc_status llc_memset(void* dst, int value, size_t bytes, llc_stream s) {
    return from_cuda(cudaMemsetAsync(dst, value, bytes, s), "memset");
}

llc_status llc_stream_create(llc_stream* s) {
    return from_cuda(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
}
llc_status llc_stream_destroy(llc_stream s) { return from_cuda(cudaStreamDestroy(s), "cudaStreamDestroy"); }
llc_status llc_stream_sync(llc_stream s) { return from_cuda(cudaStreamSynchronize(s), "stream synchronize"); }
llc_status llc_event_create(llc_event* e) { return from_cuda(cudaEventCreate(e), "cudaEventCreate"); }
llc_status llc_event_destroy(llc_event e) { return from_cuda(cudaEventDestroy(e), "cudaEventDestroy"); }
llc_status llc_event_record(llc_event e, llc_stream s) { return from_cuda(cudaEventRecord(e, s), "cudaEventRecord"); }
llc_status llc_stream_wait_event(llc_stream s, llc_event e) {
    return from_cuda(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
}
llc_status llc_event_sync(llc_event e) { return from_cuda(cudaEventSynchronize(e), "event synchronize"); }
llc_status llc_event_elapsed_ms(float* ms, llc_event start, llc_event end) {
    return from_cuda(cudaEventElapsedTime(ms, start, end), "cudaEventElapsedTime");
}

llc_status llc_capture_begin(llc_stream s) {
    LLC_REQUIRE(s, "capture_begin: the default stream cannot be captured");
    return from_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

llc_status llc_capture_end(llc_stream s, llc_graph* g) {
    LLC_REQUIRE(g, "capture_end: no graph to fill");
    cudaGraph_t graph = nullptr;
    if (llc_status st = from_cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture")) return st;
    const llc_status st = from_cuda(cudaGraphInstantiate(g, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    return st;
}

llc_status llc_graph_launch(llc_graph g, llc_stream s) { return from_cuda(cudaGraphLaunch(g, s), "cudaGraphLaunch"); }
llc_status llc_graph_destroy(llc_graph g) { return from_cuda(cudaGraphExecDestroy(g), "cudaGraphExecDestroy"); }

}  // extern "C"
