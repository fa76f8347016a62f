// gguf.h — a GGUF (v2/v3, little-endian) reader that never trusts its input.
//
// GGUFFile::open maps the file read-only and validates all of it up front: every count, length,
// dimension, offset and size is checked against the bytes that remain, with overflow-safe
// arithmetic, before it is used; nothing is allocated in proportion to a declared count before
// the file is known to hold that many encoded items. Any malformed file raises GGUFError whose
// message names the field and the offending value. Once open succeeds, every tensor's bytes lie
// inside the mapping, tensors do not overlap, and their offsets honour the alignment.
//
// Layout (all little-endian):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x { string key, u32 value_type, value },
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to general.alignment (default 32), then the data section; tensor offsets are
//   relative to the data section start.
//   string = u64 length + bytes (no NUL); array = u32 elem_type + u64 count + elements
//   (elements of a nested array are again elem_type + count + elements).
//
// Usage (model code):
//   auto f = lll::GGUFFile::open(path);
//   std::string arch = f->get_string("general.architecture");
//   uint32_t n_layer = f->get_u32(arch + ".block_count");
//   float eps = f->get_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
//   const lll::GGUFTensor* w = f->tensor("blk.0.attn_q.weight");   // nullptr if absent
//   // w->data: w->nbytes bytes of w->type blocks, rows of w->ne[0] elements
// The mapping lives as long as the shared_ptr; tensors' data pointers are valid for that long.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "common/blocks.h"
#include "gguf/gguf_value.h"

namespace lll {

// The file could not be opened or mapped at all (missing, unreadable, not a regular file).
// Not a format error: code() carries the errno, path() the file, reason() a short cause
// ("not a regular file"; empty when the errno's own text says it all).
class GGUFOpenError : public std::system_error {
  public:
    GGUFOpenError(int err, const std::string& path, const std::string& what, const std::string& reason = "")
        : std::system_error(err, std::generic_category(), what), path_(path), reason_(reason) {}
    const std::string& path() const { return path_; }
    const std::string& reason() const { return reason_; }

  private:
    std::string path_;
    std::string reason_;
};

constexpr uint32_t kGGUFDefaultAlignment = 32;
constexpr int kGGUFMaxDims = 4;
constexpr int kGGUFMaxArrayNesting = 4;              // ARRAY[ARRAY[ARRAY[ARRAY[x]]]] at most
constexpr uint64_t kGGUFMaxStringLength = 1ull << 30; // 1 GiB

struct GGUFTensor {
    std::string name;
    GGMLType type = GGMLType::F32;
    int n_dims = 0;
    int64_t ne[kGGUFMaxDims] = {1, 1, 1, 1};  // ggml order: ne[0] = row length; unused dims = 1
    uint64_t offset = 0;       // within the data section, as stored
    uint64_t file_offset = 0;  // absolute offset in the file (data_offset + offset)
    uint64_t nbytes = 0;       // encoded size: n_elements / block_elems * block_bytes
    const uint8_t* data = nullptr;  // zero-copy view into the read-only mapping

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // Bytes of one row of ne[0] elements.
    uint64_t row_bytes() const;
};

class GGUFFile {
  public:
    // Map and validate the file. Throws GGUFOpenError when it cannot be opened/mapped and
    // GGUFError when its contents are malformed.
    static std::shared_ptr<GGUFFile> open(const std::string& path);
    ~GGUFFile();
    GGUFFile(const GGUFFile&) = delete;
    GGUFFile& operator=(const GGUFFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t file_size() const { return size_; }
    size_t data_offset() const { return data_offset_; }  // absolute start of the data section
    size_t alignment() const { return alignment_; }
    const uint8_t* file_bytes() const { return base_; }

    // Metadata in file order.
    const std::vector<GGUFKeyValue>& metadata() const { return kv_; }
    const GGUFValue* find(const std::string& key) const;  // nullptr if absent
    bool has(const std::string& key) const { return find(key) != nullptr; }

    // Typed getters. Without a default they throw GGUFError when the key is absent; all of them
    // throw GGUFError (naming the key, its type and value) when the stored value does not fit.
    std::string get_string(const std::string& key) const;
    std::string get_string(const std::string& key, const std::string& dflt) const;
    uint32_t get_u32(const std::string& key) const;                 // any integer type in range
    uint32_t get_u32(const std::string& key, uint32_t dflt) const;
    uint64_t get_u64(const std::string& key) const;                 // any integer type >= 0
    uint64_t get_u64(const std::string& key, uint64_t dflt) const;
    float get_f32(const std::string& key) const;                    // FLOAT32/64 or integer
    float get_f32(const std::string& key, float dflt) const;
    bool get_bool(const std::string& key, bool dflt) const;         // BOOL only
    // Whole arrays (throw when absent): numbers converted elementwise with range checks.
    std::vector<float> get_f32_array(const std::string& key) const;
    std::vector<int32_t> get_i32_array(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;

    const std::vector<GGUFTensor>& tensors() const { return tensors_; }
    const GGUFTensor* tensor(const std::string& name) const;  // nullptr if absent

  private:
    GGUFFile() = default;
    const GGUFValue& require(const std::string& key) const;

    friend class GGUFParser;
    std::string path_;
    const uint8_t* base_ = nullptr;   // the read-only mapping (nullptr for an empty file)
    size_t size_ = 0;
    uint32_t version_ = 0;
    size_t alignment_ = kGGUFDefaultAlignment;
    size_t data_offset_ = 0;
    std::vector<GGUFKeyValue> kv_;
    std::unordered_map<std::string_view, size_t> kv_index_;   // keys point into the mapping
    std::vector<GGUFTensor> tensors_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace lll
