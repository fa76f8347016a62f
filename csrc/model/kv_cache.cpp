// kv_cache.cpp — paged KV storage (see kv_cache.h).
#include "model/kv_cache.h"
#include <ctype.h>
#include <math.h>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include "common/fp16.h"
#include "backends/cpu/quants/quants.h"
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace lll {

namespace {

bool is_cache_type(GGMLType t) { return t == GGMLType::F16 || t == GGMLType::Q8_0 || t == GGMLType::Q4_0; }

size_t row_bytes(GGMLType t, int64_t n) {
    const TypeTraits* tt = type_traits(t);
    return (size_t)(n / tt->block_elems) * tt->block_bytes;
}

// F16 -> f32 of n values. Exact either way; F16C only makes it faster where it exists.
void f16_to_f32_row(const fp16_t* x, float* y, int n) {
    int i = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
#endif
    for (; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}

// One cache row as ggml's CPU backend stores it (its from_float: Q8_0 with its x86 rounding,
// Q4_0 with the reference quantizer, F16 round-to-nearest-even).
void store_row(GGMLType t, const float* x, uint8_t* dst, int64_t n) {
    if (t == GGMLType::F16 || t == GGMLType::Q8_0) {
        // The activation quantizer's SIMD rows: F16 through vcvtps2ph, bit for bit the scalar
        // f32_to_fp16 (round to nearest even, NaN kept quiet), 8-16 values an instruction.
        quantize_act_row(t, x, dst, n, best_isa());
    } else {
        quantize_row_ref(t, x, dst, n);
    }
}

}  // namespace

GGMLType parse_cache_type(const std::string& name) {
    std::string lower;
    for (char c : name) lower += (char)tolower((unsigned char)c);
    if (lower == "f16") return GGMLType::F16;
    if (lower == "q8_0") return GGMLType::Q8_0;
    if (lower == "q4_0") return GGMLType::Q4_0;
    throw std::invalid_argument("KV cache type '" + name + "' is not supported (choose f16, q8_0 or q4_0)");
}

const char* cache_type_name(GGMLType type) {
    return type == GGMLType::F16 ? "f16" : type == GGMLType::Q8_0 ? "q8_0" : type == GGMLType::Q4_0 ? "q4_0" : "?";
}

void check_kv_types(KVTypes types, int head_dim) {
    for (GGMLType t : {types.k, types.v}) {
        if (!is_cache_type(t))
            throw std::invalid_argument(std::string("KV cache type ") + ggml_type_name((uint32_t)t) +
                                        " is not supported (choose f16, q8_0 or q4_0)");
        const int blk = type_traits(t)->block_elems;
        if (head_dim % blk != 0)
            throw std::invalid_argument(std::string("a ") + cache_type_name(t) + " KV cache needs head_dim to be a "
                                        "multiple of " + std::to_string(blk) + "; this model's is " +
                                        std::to_string(head_dim) + " (use f16)");
    }
}

size_t KVCache::layer_bytes(int64_t n_blocks, int block_size, int64_t kv_width, KVTypes types) {
    const size_t slots = (size_t)n_blocks * (size_t)block_size;
    return slots * (row_bytes(types.k, kv_width) + row_bytes(types.v, kv_width));
}

float hadamard_scale(int n) { return (float)(1.0 / sqrt((double)n)); }

void hadamard_rotate(float* x, int64_t len, int n) {
    const float scale = hadamard_scale(n);
    for (int64_t c = 0; c + n <= len; c += n) {
        float* v = x + c;
        for (int h = 1; h < n; h *= 2)              // butterflies: H_2h = [[H_h, H_h], [H_h, -H_h]]
            for (int i = 0; i < n; i += 2 * h)
                for (int j = i; j < i + h; ++j) {
                    const float a = v[j], b = v[j + h];
                    v[j] = a + b, v[j + h] = a - b;
                }
        for (int i = 0; i < n; ++i) v[i] *= scale;
    }
}

KVCache::KVCache(const std::vector<Backend*>& layer_backends, int64_t n_blocks, int block_size, int n_head_kv,
                 int head_dim, KVTypes types)
    : backends_(layer_backends), n_blocks_(n_blocks), block_size_(block_size),
      kv_width_((int64_t)n_head_kv * head_dim), n_head_kv_(n_head_kv), head_dim_(head_dim), types_(types) {
    const int n_layer = (int)layer_backends.size();
    if (n_layer <= 0 || n_blocks <= 0 || block_size <= 0 || n_head_kv <= 0 || head_dim <= 0)
        throw std::invalid_argument("kv cache: n_blocks, block_size, n_head_kv and head_dim must be positive (got "
                                    "n_blocks=" + std::to_string(n_blocks) + ", block_size=" +
                                    std::to_string(block_size) + ")");
    const int64_t kv_width = kv_width_;
    // llama.cpp's choice of rotation (llama-kv-cache.cpp, build_input_k_rot / _v_rot).
    if (head_dim % 64 == 0) {
        if (type_traits(types.k) && type_traits(types.k)->quantized) {
            rot_k_ = 64;
            while (head_dim % (2 * rot_k_) == 0) rot_k_ *= 2;
        }
        if (type_traits(types.v) && type_traits(types.v)->quantized) rot_v_ = 64;
    }
    for (GGMLType t : {types.k, types.v}) {
        if (!is_cache_type(t)) check_kv_types(types, 0);   // throws, naming the type
        if (kv_width % type_traits(t)->block_elems != 0)
            throw std::invalid_argument(std::string("kv cache: a ") + cache_type_name(t) + " row needs kv_width to be a "
                                        "multiple of " + std::to_string(type_traits(t)->block_elems));
    }
    k_row_ = row_bytes(types.k, kv_width);
    v_row_ = row_bytes(types.v, kv_width);
    // Refused before allocating when the host's share cannot fit: more than the machine's memory
    // would end in the OOM killer, not an error (a device backend's alloc reports its own OOM).
    int host_layers = 0;
    for (const Backend* b : layer_backends) host_layers += b->host_memory();
    const double bytes = (double)host_layers * (double)layer_bytes(n_blocks, block_size, kv_width, types);
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (bytes > ram)
        throw std::invalid_argument("kv cache: " + std::to_string((long long)(bytes / (1 << 20))) +
                                    " MiB for K and V exceeds this machine's memory (" +
                                    std::to_string((long long)(ram / (1 << 20))) +
                                    " MiB); reduce n_ctx or kv blocks");
    const size_t k_part = (size_t)n_blocks * block_size * k_row_;
    for (int l = 0; l < n_layer; ++l) {
        storage_.push_back(backends_[l]->alloc(layer_bytes(n_blocks, block_size, kv_width, types), MemKind::KV,
                                               "KV cache of layer " + std::to_string(l)));
        k_.push_back(storage_.back()->data());
        v_.push_back(storage_.back()->data() + k_part);
        host_.push_back(backends_[l]->host_memory());
    }
}

size_t KVCache::bytes() const {
    size_t total = 0;
    for (const auto& b : storage_) total += b->bytes();
    return total;
}

void KVCache::write(int layer, int64_t block, int off, const float* k, const float* v) {
    static thread_local std::vector<float> rotated;
    for (int side = 0; side < 2; ++side) {
        const float* x = side ? v : k;
        const int rot = side ? rot_v_ : rot_k_;
        if (rot) {
            rotated.assign(x, x + kv_width_);
            hadamard_rotate(rotated.data(), kv_width_, rot);
            x = rotated.data();
        }
        if (head_major(layer, side)) {   // one F16 row per head, each in its head's run of the block
            fp16_t* base = (fp16_t*)(side ? v_[layer] : k_[layer]);
            for (int h = 0; h < n_head_kv_; ++h)
                store_row(GGMLType::F16, x + (int64_t)h * head_dim_,
                          (uint8_t*)(base + f16_index(layer, side, block, off, (int64_t)h * head_dim_)), head_dim_);
            continue;
        }
        store_row(side ? types_.v : types_.k, x, side ? v_bytes(layer, block, off) : k_bytes(layer, block, off),
                  kv_width_);
    }
}

void KVCache::read(bool values, int layer, int64_t block, int off, int64_t col, int n, float* dst) const {
    const GGMLType t = values ? types_.v : types_.k;
    if (t == GGMLType::F16) {   // head by head: a head-major row is contiguous within one head only
        const fp16_t* base = (const fp16_t*)(values ? v_[layer] : k_[layer]);
        for (int64_t c = col, end = col + n; c < end;) {
            const int64_t piece = std::min(end, (c / head_dim_ + 1) * head_dim_) - c;
            f16_to_f32_row(base + f16_index(layer, values, block, off, c), dst + (c - col), (int)piece);
            c += piece;
        }
        return;
    }
    const uint8_t* row = values ? v_bytes(layer, block, off) : k_bytes(layer, block, off);
    const TypeTraits* tt = type_traits(t);
    tt->dequantize(row + (size_t)(col / tt->block_elems) * tt->block_bytes, dst, n);
}

void KVCache::copy_block(int64_t src, int64_t dst) {
    if (src < 0 || src >= n_blocks_ || dst < 0 || dst >= n_blocks_)
        throw std::invalid_argument("kv cache: copy_block(" + std::to_string(src) + ", " + std::to_string(dst) +
                                    "): block ids must be in [0, " + std::to_string(n_blocks_) + ")");
    for (size_t l = 0; l < backends_.size(); ++l) {
        backends_[l]->copy(k_bytes((int)l, dst, 0), k_bytes((int)l, src, 0), (size_t)block_size_ * k_row_);
        backends_[l]->copy(v_bytes((int)l, dst, 0), v_bytes((int)l, src, 0), (size_t)block_size_ * v_row_);
    }
}

}  // namespace lll
