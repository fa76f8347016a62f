// cuda_api.h — the C API of the CUDA kernels (cuda/*.cu), and a thin C++ face over it.
//
// Includes no CUDA header: a CudaBackend in csrc/ compiles with the host compiler alone. Every
// llc_* function returns an llc_status; on failure llc_last_error() (per thread) holds a message
// naming the operation and the cause. lll::cuda::check() turns a status into a C++ exception
// (OutOfMemory for a GPU allocation that did not fit, naming what was asked for).
//
// Memory: device pointers come from llc_malloc. All tensors are row-major f32 unless named
// otherwise; weights are GGUF rows (N rows of llc_row_bytes(type, K) bytes, the block structs of
// csrc/common/blocks.h). The KV cache of one layer is K and V, each [n_blocks][block_size][kv_width] F16
// (the CPU KVCache's layout for one layer), addressed through the block tables shared with the CPU.
// Operations are queued on a stream (nullptr: the default stream) and run asynchronously.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <new>
#include <stdexcept>
#include <string>
extern "C" {
#endif

typedef enum {
    LLC_OK = 0,
    LLC_NO_DEVICE = 1,          // no CUDA device or driver on this machine
    LLC_OUT_OF_MEMORY = 2,      // a device allocation did not fit
    LLC_INVALID_ARGUMENT = 3,   // shape, type or pointer the kernels cannot take
    LLC_CUDA_ERROR = 4,         // any other CUDA runtime error (launch, copy, sticky fault)
} llc_status;

typedef struct CUstream_st* llc_stream;   // the same type as cudaStream_t
typedef struct CUevent_st* llc_event;     // the same type as cudaEvent_t
typedef struct CUgraphExec_st* llc_graph; // the same type as cudaGraphExec_t

const char* llc_last_error(void);         // message of this thread's last failure ("" when none)

// ---- devices, memory, streams, events (runtime.cu) ----
int llc_device_count(void);               // 0 when there is no device or no driver
llc_status llc_device_name(int device, char* buf, size_t buf_len);
llc_status llc_set_device(int device);
llc_status llc_mem_info(size_t* free_bytes, size_t* total_bytes);
// `what` names the allocation in the out-of-memory message (e.g. "layer 3 ffn_up weight").
llc_status llc_malloc(void** ptr, size_t bytes, const char* what);
llc_status llc_free(void* ptr);
llc_status llc_memcpy_h2d(void* dst, const void* src, size_t bytes, llc_stream s);
llc_status llc_memcpy_d2h(void* dst, const void* src, size_t bytes, llc_stream s);
llc_status llc_memcpy_d2d(void* dst, const void* src, size_t bytes, llc_stream s);
llc_status llc_memset(void* dst, int value, size_t bytes, llc_stream s);
llc_status llc_stream_create(llc_stream* s);
llc_status llc_stream_destroy(llc_stream s);
llc_status llc_stream_sync(llc_stream s);
llc_status llc_event_create(llc_event* e);
llc_status llc_event_destroy(llc_event e);
llc_status llc_event_record(llc_event e, llc_stream s);
llc_status llc_stream_wait_event(llc_stream s, llc_event e);
llc_status llc_event_sync(llc_event e);
llc_status llc_event_elapsed_ms(float* ms, llc_event start, llc_event end);
// CUDA graphs for decode steps (small models are launch-bound): between capture_begin and
// capture_end the operations queued on stream s (not the default stream) are recorded, not run;
// the graph then replays them, reading whatever the same device buffers hold at launch time.
llc_status llc_capture_begin(llc_stream s);
llc_status llc_capture_end(llc_stream s, llc_graph* g);
llc_status llc_graph_launch(llc_graph g, llc_stream s);
llc_status llc_graph_destroy(llc_graph g);

// ---- weights (dequant.cu, matmul.cu); type = GGUF type id ----
int llc_matmul_supports(uint32_t type);   // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
size_t llc_row_bytes(uint32_t type, int64_t k);   // 0 when k is not a whole number of blocks
// y[n] = the n elements of `type` at src, dequantized exactly as csrc/backends/cpu/quants/ref's CPU code does.
llc_status llc_dequantize(uint32_t type, const void* src, float* y, int64_t n, llc_stream s);
// out[T][k] = dequantized rows ids[T] of a [n_rows][k] weight (the token embedding). The caller
// checks ids against n_rows (the CPU's message); a row id out of range gives a zero row here.
llc_status llc_get_rows(uint32_t type, const void* w, int64_t n_rows, int64_t k, const int32_t* ids,
                        int64_t T, float* out, llc_stream s);

typedef enum {
    LLC_MATMUL_AUTO = 0,     // decode path for M <= 8, prompt path above
    LLC_MATMUL_DECODE = 1,   // int8 dot products on q8_1 activations (float dot for F32/F16/BF16)
    LLC_MATMUL_PROMPT = 2,   // tensor cores: weight tiles dequantized to F16 in shared memory
} llc_matmul_path;
// Bytes of device scratch llc_matmul needs for M activation rows of k (the q8_1 activations).
size_t llc_matmul_scratch_bytes(uint32_t type, int64_t k, int64_t M, llc_matmul_path path);
// y[M][N] = x[M][K] . w[N][K]^T, w in GGUF rows of `type`.
llc_status llc_matmul(uint32_t type, const void* w, int64_t N, int64_t K, const float* x, int64_t M,
                      float* y, void* scratch, size_t scratch_bytes, llc_matmul_path path, llc_stream s);

// ---- row and element-wise ops (ops.cu) ----
// y[rows][n] = x / sqrt(mean(x^2) + eps) * w (w may be null); in place allowed.
llc_status llc_rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps,
                        llc_stream s);
// RoPE scaling (csrc/common/rope.h RopeScaling, plus the frequency factors as a device array).
typedef struct {
    float freq_scale, ext_factor, attn_factor;
    int n_ctx_orig;
    float beta_fast, beta_slow;
    const float* freq_factors;   // device [rope_dims/2], or NULL
} llc_rope_scaling;
// cs[T][rope_dims] = (cos, sin) pairs of theta_i = pos * base^(-2i/rope_dims) with the scaling
// applied (NULL: none), the table of csrc/backends/cpu/ops.cpp's rope_table (csrc/common/rope.h, the same floats).
llc_status llc_rope_table(const int32_t* positions, int64_t T, int rope_dims, float base,
                          const llc_rope_scaling* scaling, float* cs, llc_stream s);
// In place on x[T][n_heads][head_dim]; style 0 = normal (adjacent pairs), 1 = NeoX (halves).
llc_status llc_rope(float* x, int64_t T, int n_heads, int head_dim, int rope_dims, const float* cs, int style,
                    llc_stream s);
llc_status llc_swiglu(const float* gate, const float* up, float* out, int64_t n, llc_stream s);
// gelu_tanh of gate rounded to F16, the result rounded to F16 (ggml's GELU table), times up.
llc_status llc_geglu(const float* gate, const float* up, float* out, int64_t n, llc_stream s);
llc_status llc_add(float* y, const float* x, int64_t n, llc_stream s);                 // y += x
llc_status llc_add_bias_rows(float* rows, const float* bias, int64_t n_rows, int64_t n, llc_stream s);
llc_status llc_scale(float* y, float scale, int64_t n, llc_stream s);                  // y *= scale

// ---- paged KV cache and attention (attention.cu) ----
// A batch's addressing, in device memory, as csrc/model/model.h's Batch: token t of sequence
// seq_of_token[t] at positions[t], its K/V slot at block block_tables[seq * max_blocks + pos /
// block_size], offset pos % block_size. Tokens of one sequence are contiguous with increasing
// positions. tiles: [n_tiles][2] query-token ranges (llc_attention_tiles) for prompt attention.
typedef struct {
    const int32_t* positions;
    const int32_t* seq_of_token;
    const int32_t* block_tables;
    const int32_t* tiles;
    int64_t n_tokens, n_seqs, max_blocks, n_tiles;
    int32_t max_tile_tokens;   // longest tile (1: a decode batch, the decode kernel runs)
} llc_batch;
typedef struct {
    uint16_t* k;               // [n_blocks][block_size][kv_width] F16 bits
    uint16_t* v;
    int64_t n_blocks;
    int32_t block_size;
    int64_t kv_width;          // n_head_kv * head_dim
} llc_kv_layer;

// Splits host seq_of_token[T] into runs of one sequence cut into tiles of at most
// LLC_ATTN_TILE_TOKENS tokens: tiles[2i], tiles[2i+1] = first and one-past-last token. Returns the
// tile count (at most T); `tiles` holds 2*T ints. *max_tile_tokens: the longest tile.
#define LLC_ATTN_TILE_TOKENS 16
int64_t llc_attention_tiles(const int32_t* seq_of_token, int64_t T, int32_t* tiles, int32_t* max_tile_tokens);
// Stores k[T][kv_width], v[T][kv_width] (f32) as F16 (round to nearest even) in each token's slot.
llc_status llc_kv_write(llc_kv_layer kv, const float* k, const float* v, const llc_batch* b, llc_stream s);
// Copies block src to block dst in K and V (copy-on-write).
llc_status llc_kv_copy_block(llc_kv_layer kv, int64_t src, int64_t dst, llc_stream s);
// out[T][n_head*head_dim] = softmax(scale * q.K^T) . V per head over the keys each token sees:
// positions [max(0, pos - window + 1), pos] of its sequence (window 0 = all), GQA heads
// h -> h / (n_head / n_head_kv). head_dim: a multiple of 32, at most 256. Block ids out of
// [0, n_blocks) are skipped, never read (the CPU's validation reports them first). softcap > 0:
// scores become tanh(s / softcap) * softcap before the softmax (Gemma 2).
llc_status llc_attention(llc_kv_layer kv, const float* q, float* out, const llc_batch* b, int n_head,
                         int n_head_kv, int head_dim, float scale, int window, float softcap, llc_stream s);

// ---- host twins (host_check.cu): the device code of the decode path and of dequantization run
// on the CPU, so that machines with no GPU check its arithmetic (tests/cuda_host_check.py) ----
llc_status llc_host_decode_matmul(uint32_t type, const void* w, int64_t N, int64_t K, const float* x, int64_t M,
                                  float* y);
llc_status llc_host_dequantize(uint32_t type, const void* src, float* y, int64_t n);

#ifdef __cplusplus
}  // extern "C"

namespace lll {
namespace cuda {

// Any CUDA failure other than a bad argument or a full device.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// A device allocation that did not fit; the message names it, its size and the free memory.
struct OutOfMemory : Error {
    using Error::Error;
};

inline void check(llc_status s) {
    if (s == LLC_OK) return;
    const std::string msg = llc_last_error();
    if (s == LLC_OUT_OF_MEMORY) throw OutOfMemory(msg);
    if (s == LLC_INVALID_ARGUMENT) throw std::invalid_argument(msg);
    throw Error(msg);
}

// One device allocation, freed with its owner.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
        if (bytes) check(llc_malloc(&ptr_, bytes, what));
    }
    ~DeviceBuffer() { if (ptr_) llc_free(ptr_); }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            if (ptr_) llc_free(ptr_);
            ptr_ = o.ptr_, bytes_ = o.bytes_, o.ptr_ = nullptr, o.bytes_ = 0;
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    template <class T> T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace cuda
}  // namespace lll
#endif
