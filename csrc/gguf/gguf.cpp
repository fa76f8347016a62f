// gguf.cpp — mapping and validating a GGUF file (see gguf.h for the layout and guarantees).
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

namespace lll {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the GGUF reader assumes a little-endian host");

// Smallest possible encodings, used to bound declared counts by the bytes actually present:
// a key-value is a >= 1-byte key (8 + 1), a type (4) and a >= 1-byte value; a tensor info is a
// >= 1-byte name (8 + 1), n_dims (4), one dim (8), type (4) and offset (8).
constexpr uint64_t kMinKVBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
constexpr uint64_t kMinStringBytes = 8;                 // length prefix of an empty string
constexpr uint64_t kMinArrayBytes = 4 + 8;              // elem type + count of an empty array

std::string u64s(uint64_t v) { return std::to_string(v); }

// Quote a string from the file for an error message: printable ASCII kept, the rest \xNN,
// long strings cut (a hostile name may be a gigabyte of control characters).
std::string quoted(std::string_view s) {
    constexpr size_t kMaxShown = 96;
    std::string out = "'";
    for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            out += static_cast<char>(c);
        } else {
            char buf[8];
            snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    if (s.size() > kMaxShown) out += "...";
    return out + "'";
}

// Bounds-checked little-endian reads from the mapped bytes. Errors carry no "gguf:" prefix;
// the section parsers prepend where in the file the read happened.
class Cursor {
  public:
    Cursor(const uint8_t* base, size_t size) : base_(base), size_(size) {}
    size_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    const uint8_t* take(uint64_t n, const char* what) {
        if (n > remaining())
            throw GGUFError(std::string("truncated file: ") + what + " needs " + u64s(n) +
                            " bytes at offset " + u64s(pos_) + " but only " + u64s(remaining()) +
                            " remain");
        const uint8_t* p = base_ + pos_;
        pos_ += static_cast<size_t>(n);
        return p;
    }

    template <class T>
    T read(const char* what) {
        T v;
        memcpy(&v, take(sizeof(T), what), sizeof(T));
        return v;
    }

    std::string_view read_string(const char* what) {
        const uint64_t len = read<uint64_t>(what);
        if (len > kGGUFMaxStringLength)
            throw GGUFError(std::string(what) + " length " + u64s(len) + " exceeds the 1 GiB limit");
        if (len > remaining())
            throw GGUFError(std::string(what) + " length " + u64s(len) + " at offset " +
                            u64s(pos_ - 8) + " runs past end of file (" + u64s(remaining()) +
                            " bytes remain)");
        return std::string_view(reinterpret_cast<const char*>(take(len, what)), static_cast<size_t>(len));
    }

  private:
    const uint8_t* base_;
    size_t size_;
    size_t pos_ = 0;
};

// Throw unless count items of at least min_bytes each can fit in the remaining bytes; called
// before any container is sized from a count read out of the file.
void require_room(uint64_t count, uint64_t min_bytes, uint64_t remaining, const std::string& what) {
    uint64_t need;
    const bool overflow = __builtin_mul_overflow(count, min_bytes, &need);
    if (overflow || need > remaining)
        throw GGUFError(what + "=" + u64s(count) + " is impossible: it needs at least " +
                        (overflow ? std::string("2^64+") : u64s(need)) + " bytes but only " +
                        u64s(remaining) + " remain in the file");
}

// The memory the parsed index may take: the vectors of views, nested values, key and tensor
// entries that are not the file's own bytes. A file of 3.8 M empty nested arrays (46 MB) once
// took 1 GB to open and convert; every container is charged here before it is sized, so the
// index never needs more than the file's size plus kSlack.
class IndexBudget {
  public:
    explicit IndexBudget(uint64_t file_size) : limit_(file_size + kSlack) {}
    void charge(uint64_t count, uint64_t bytes_each, const std::string& what) {
        uint64_t bytes;
        if (__builtin_mul_overflow(count, bytes_each, &bytes) || __builtin_add_overflow(used_, bytes, &used_) ||
            used_ > limit_)
            throw GGUFError(what + "=" + u64s(count) + " would need more memory to index than the file's size " +
                            "allows (limit: file size + 16 MiB = " + u64s(limit_) + " bytes)");
    }

  private:
    static constexpr uint64_t kSlack = 16ull << 20;
    uint64_t limit_;
    uint64_t used_ = 0;
};

// What one entry of the key and tensor indexes costs beyond its vector slot: a hash node.
constexpr uint64_t kHashNodeBytes = 48;

GGUFValue parse_value(Cursor& cur, IndexBudget& budget, uint32_t type_id, int depth);

// An array whose own nesting level is `depth` (1 for an array that is a key's value).
GGUFValue parse_array(Cursor& cur, IndexBudget& budget, int depth) {
    GGUFValue v;
    v.type = GGUFValueType::ARRAY;
    const uint32_t elem_id = cur.read<uint32_t>("array element type");
    if (elem_id >= kGGUFValueTypeCount)
        throw GGUFError("unknown array element type id " + u64s(elem_id) + " (valid: 0..12)");
    v.elem_type = static_cast<GGUFValueType>(elem_id);
    if (v.elem_type == GGUFValueType::ARRAY && depth + 1 > kGGUFMaxArrayNesting)
        throw GGUFError("arrays nested deeper than " + std::to_string(kGGUFMaxArrayNesting) + " levels");
    v.count = cur.read<uint64_t>("array count");

    const uint64_t scalar = gguf_scalar_size(v.elem_type);
    const uint64_t min_elem = scalar ? scalar
                              : v.elem_type == GGUFValueType::STRING ? kMinStringBytes : kMinArrayBytes;
    require_room(v.count, min_elem, cur.remaining(),
                 std::string("array count of ") + gguf_value_type_name(v.elem_type));
    if (scalar) {
        v.raw_len = v.count * scalar;   // cannot overflow: checked by require_room
        v.raw = cur.take(v.raw_len, "array elements");
        if (v.elem_type == GGUFValueType::BOOL) {
            for (uint64_t i = 0; i < v.count; ++i)
                if (v.raw[i] > 1)
                    throw GGUFError("array element " + u64s(i) + ": BOOL byte " + u64s(v.raw[i]) +
                                    " (must be 0 or 1)");
        }
    } else if (v.elem_type == GGUFValueType::STRING) {
        budget.charge(v.count, sizeof(std::string_view), "array count of STRING");
        v.strings.reserve(static_cast<size_t>(v.count));
        for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(cur.read_string("array string"));
    } else {
        budget.charge(v.count, sizeof(GGUFValue), "array count of ARRAY");
        v.arrays.reserve(static_cast<size_t>(v.count));
        for (uint64_t i = 0; i < v.count; ++i) v.arrays.push_back(parse_array(cur, budget, depth + 1));
    }
    return v;
}

GGUFValue parse_value(Cursor& cur, IndexBudget& budget, uint32_t type_id, int depth) {
    if (type_id >= kGGUFValueTypeCount)
        throw GGUFError("unknown metadata value type id " + u64s(type_id) + " (valid: 0..12)");
    const auto type = static_cast<GGUFValueType>(type_id);
    if (type == GGUFValueType::ARRAY) return parse_array(cur, budget, depth + 1);
    GGUFValue v;
    v.type = type;
    if (type == GGUFValueType::STRING) {
        const std::string_view s = cur.read_string("string value");
        v.raw = reinterpret_cast<const uint8_t*>(s.data());
        v.raw_len = s.size();
        return v;
    }
    v.raw_len = gguf_scalar_size(type);
    v.raw = cur.take(v.raw_len, gguf_value_type_name(type));
    if (type == GGUFValueType::BOOL && v.raw[0] > 1)
        throw GGUFError("BOOL byte " + u64s(v.raw[0]) + " (must be 0 or 1)");
    return v;
}

// The read-only mapping of a whole file, unmapped on destruction unless released.
struct Mapping {
    const uint8_t* base = nullptr;
    size_t size = 0;
    ~Mapping() {
        if (base) munmap(const_cast<uint8_t*>(base), size);
    }
};

void map_file(const std::string& path, Mapping* m) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        throw GGUFOpenError(err, path, "gguf: cannot open '" + path + "'");
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw GGUFOpenError(err, path, "gguf: cannot stat '" + path + "'");
    }
    if (!S_ISREG(st.st_mode)) {   // a directory, FIFO or device has no fixed size to map
        ::close(fd);
        throw GGUFOpenError(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, path,
                            "gguf: '" + path + "' is not a regular file", "not a regular file");
    }
    m->size = static_cast<size_t>(st.st_size);
    if (m->size > 0) {   // mmap rejects length 0; an empty file fails the magic check instead
        void* p = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw GGUFOpenError(err, path, "gguf: cannot map '" + path + "'");
        }
        m->base = static_cast<const uint8_t*>(p);
    }
    ::close(fd);   // the mapping keeps the file contents reachable
}

}  // namespace

uint64_t GGUFTensor::row_bytes() const {
    const TypeTraits* tt = type_traits(type);
    return static_cast<uint64_t>(ne[0] / tt->block_elems) * static_cast<uint64_t>(tt->block_bytes);
}

// Fills a GGUFFile section by section; every method throws GGUFError on malformed input.
class GGUFParser {
  public:
    GGUFParser(GGUFFile& f) : f_(f), cur_(f.base_, f.size_), budget_(f.size_) {}

    void parse() {
        parse_header();
        parse_metadata();
        resolve_alignment();
        parse_tensor_infos();
        place_tensors();
    }

  private:
    void parse_header();
    void parse_metadata();
    std::string_view read_key();
    void resolve_alignment();
    void parse_tensor_infos();
    void parse_one_tensor_info(GGUFTensor& t);
    void place_tensors();

    GGUFFile& f_;
    Cursor cur_;
    IndexBudget budget_;
    uint64_t n_tensors_ = 0;
    uint64_t n_kv_ = 0;
};

void GGUFParser::parse_header() {
    try {
        const uint8_t* magic = cur_.take(4, "magic");
        if (memcmp(magic, "GGUF", 4) != 0) {
            char buf[64];
            snprintf(buf, sizeof buf, "bad magic 0x%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
            throw GGUFError(std::string("not a GGUF file (") + buf + ", expected 'GGUF')");
        }
        const uint32_t version = cur_.read<uint32_t>("version");
        if (version != 0 && (version & 0xFFFFu) == 0)
            throw GGUFError("version field " + u64s(version) +
                            " looks byte-swapped: big-endian GGUF files are not supported");
        if (version < 2)
            throw GGUFError("GGUF version " + u64s(version) + " is not supported (only v2 and v3)");
        if (version > 3)
            throw GGUFError("GGUF version " + u64s(version) + " is newer than this reader (v2, v3)");
        f_.version_ = version;
        n_tensors_ = cur_.read<uint64_t>("n_tensors");
        n_kv_ = cur_.read<uint64_t>("n_kv");
        require_room(n_kv_, kMinKVBytes, cur_.remaining(), "n_kv");
        require_room(n_tensors_, kMinTensorInfoBytes, cur_.remaining(), "n_tensors");
        budget_.charge(n_kv_, sizeof(GGUFKeyValue) + kHashNodeBytes, "n_kv");
        budget_.charge(n_tensors_, sizeof(GGUFTensor) + kHashNodeBytes, "n_tensors");
    } catch (const GGUFError& e) {
        throw GGUFError(std::string("gguf: header: ") + e.what());
    }
}

void GGUFParser::parse_metadata() {
    f_.kv_.reserve(static_cast<size_t>(n_kv_));   // bounded by require_room in parse_header
    for (uint64_t i = 0; i < n_kv_; ++i) {
        std::string_view key;
        try {
            key = read_key();
        } catch (const GGUFError& e) {   // no key to name: its own length or bytes are the problem
            throw GGUFError("gguf: metadata entry #" + u64s(i) + ": " + e.what());
        }
        try {
            if (key.empty()) throw GGUFError("empty key");
            if (!is_valid_utf8(reinterpret_cast<const uint8_t*>(key.data()), key.size()))
                throw GGUFError("key is not valid UTF-8");
            auto dup = f_.kv_index_.find(key);
            if (dup != f_.kv_index_.end())
                throw GGUFError("duplicate key (first defined by entry #" + u64s(dup->second) + ")");
            const uint32_t type_id = cur_.read<uint32_t>("value type");
            GGUFValue value = parse_value(cur_, budget_, type_id, 0);
            f_.kv_index_.emplace(key, f_.kv_.size());
            f_.kv_.push_back(GGUFKeyValue{key, std::move(value)});
        } catch (const GGUFError& e) {
            const std::string where = key.empty() ? "" : " " + quoted(key);
            throw GGUFError("gguf: metadata entry #" + u64s(i) + where + ": " + e.what());
        }
    }
}

// The key of the next metadata entry, read in its own try block in parse_metadata: the handler
// that quotes the key then only sees keys read whole. (With the read in the same block as that
// handler, the optimized build quoted a key of length ~2^63 from process memory when its length
// field was near 2^63 and the read had thrown.)
std::string_view GGUFParser::read_key() { return cur_.read_string("key"); }

void GGUFParser::resolve_alignment() {
    const GGUFValue* a = f_.find("general.alignment");
    if (!a) return;
    if (a->type != GGUFValueType::UINT32)
        throw GGUFError("gguf: general.alignment has type " + a->type_string() + " (must be UINT32)");
    const uint32_t align = static_cast<uint32_t>(a->as_uint64());
    if (align == 0 || (align & (align - 1)) != 0)
        throw GGUFError("gguf: general.alignment=" + u64s(align) + " is not a non-zero power of two");
    f_.alignment_ = align;
}

void GGUFParser::parse_tensor_infos() {
    try {
        require_room(n_tensors_, kMinTensorInfoBytes, cur_.remaining(), "n_tensors");
    } catch (const GGUFError& e) {
        throw GGUFError(std::string("gguf: tensor infos: ") + e.what());
    }
    f_.tensors_.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
        GGUFTensor t;
        try {
            parse_one_tensor_info(t);
        } catch (const GGUFError& e) {
            const std::string where = t.name.empty() ? "" : " " + quoted(t.name);
            throw GGUFError("gguf: tensor #" + u64s(i) + where + ": " + e.what());
        }
        f_.tensors_.push_back(std::move(t));
    }
}

void GGUFParser::parse_one_tensor_info(GGUFTensor& t) {
    const std::string_view name = cur_.read_string("name");
    if (name.empty()) throw GGUFError("empty name");
    if (!is_valid_utf8(reinterpret_cast<const uint8_t*>(name.data()), name.size()))
        throw GGUFError("name " + quoted(name) + " is not valid UTF-8");
    budget_.charge(name.size(), 1, "tensor name length");   // the name is copied out of the mapping
    t.name.assign(name.data(), name.size());
    auto dup = f_.tensor_index_.find(name);
    if (dup != f_.tensor_index_.end())
        throw GGUFError("duplicate tensor name (first defined by tensor #" + u64s(dup->second) + ")");

    const uint32_t n_dims = cur_.read<uint32_t>("n_dims");
    if (n_dims == 0 || n_dims > kGGUFMaxDims)
        throw GGUFError("n_dims=" + u64s(n_dims) + " (must be 1.." + std::to_string(kGGUFMaxDims) + ")");
    t.n_dims = static_cast<int>(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        const int64_t ne = static_cast<int64_t>(cur_.read<uint64_t>("dimension"));  // int64 as stored
        if (ne <= 0) throw GGUFError("ne[" + u64s(d) + "]=" + std::to_string(ne) + " (dims must be positive)");
        if (__builtin_mul_overflow(n_elements, ne, &n_elements))
            throw GGUFError("ne[" + u64s(d) + "]=" + std::to_string(ne) +
                            ": element count overflows int64");
        t.ne[d] = ne;
    }

    const uint32_t type_id = cur_.read<uint32_t>("type");
    const TypeTraits* tt = type_traits(type_id);
    if (!tt) {
        const char* known = ggml_type_name(type_id);
        throw GGUFError("type id " + u64s(type_id) +
                        (known ? std::string(" (") + known + ") is not supported" : std::string(" is unknown")));
    }
    t.type = static_cast<GGMLType>(type_id);
    if (t.ne[0] % tt->block_elems != 0)
        throw GGUFError("ne[0]=" + std::to_string(t.ne[0]) + " is not a multiple of the " + tt->name +
                        " block size " + std::to_string(tt->block_elems));
    // Rows of ne[0] elements; the row count cannot overflow because n_elements did not, but a
    // row's bytes can (ne[0] = 2^62 F32 is 2^64 bytes, which wrapped to a size of 0).
    const uint64_t n_rows = static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    uint64_t row_bytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[0] / tt->block_elems),
                               static_cast<uint64_t>(tt->block_bytes), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, n_rows, &t.nbytes))
        throw GGUFError("byte size of ne[0]=" + std::to_string(t.ne[0]) + " x " + u64s(n_rows) +
                        " rows of " + tt->name + " overflows uint64");
    t.offset = cur_.read<uint64_t>("offset");
    f_.tensor_index_.emplace(name, f_.tensors_.size());
}

void GGUFParser::place_tensors() {
    const uint64_t end_of_infos = cur_.pos();
    const uint64_t align = f_.alignment_;
    // end_of_infos <= file size < 2^63 and align <= 2^31: this cannot overflow.
    const uint64_t data_offset = (end_of_infos + align - 1) / align * align;
    f_.data_offset_ = static_cast<size_t>(data_offset);
    for (GGUFTensor& t : f_.tensors_) {
        if (t.offset % align != 0)
            throw GGUFError("gguf: tensor " + quoted(t.name) + ": offset " + u64s(t.offset) +
                            " is not a multiple of the alignment " + u64s(align));
        uint64_t start, end;
        if (__builtin_add_overflow(data_offset, t.offset, &start) ||
            __builtin_add_overflow(start, t.nbytes, &end) || end > f_.size_)
            throw GGUFError("gguf: tensor " + quoted(t.name) + ": data at offset " + u64s(t.offset) +
                            " + " + u64s(t.nbytes) + " bytes (data section starts at " +
                            u64s(data_offset) + ") runs past end of file (size " + u64s(f_.size_) + ")");
        t.file_offset = start;
        t.data = f_.base_ + start;
    }
    // Overlaps: sort the extents by start; each must end before the next begins.
    std::vector<const GGUFTensor*> by_start;
    by_start.reserve(f_.tensors_.size());
    for (const GGUFTensor& t : f_.tensors_) by_start.push_back(&t);
    std::sort(by_start.begin(), by_start.end(),
              [](const GGUFTensor* a, const GGUFTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_start.size(); ++i) {
        const GGUFTensor& prev = *by_start[i - 1];
        const GGUFTensor& next = *by_start[i];
        if (prev.offset + prev.nbytes > next.offset)
            throw GGUFError("gguf: tensors " + quoted(prev.name) + " [" + u64s(prev.offset) + ", " +
                            u64s(prev.offset + prev.nbytes) + ") and " + quoted(next.name) +
                            " [" + u64s(next.offset) + ", ...) overlap");
    }
}

std::shared_ptr<GGUFFile> GGUFFile::open(const std::string& path) {
    Mapping m;
    map_file(path, &m);
    std::shared_ptr<GGUFFile> f(new GGUFFile());
    f->path_ = path;
    f->base_ = m.base;
    f->size_ = m.size;
    m.base = nullptr;   // the GGUFFile owns the mapping from here on
    try {
        GGUFParser(*f).parse();
    } catch (const GGUFError& e) {   // name the file: "gguf: PATH: header: bad magic ..."
        std::string_view msg = e.what();
        if (msg.substr(0, 6) == "gguf: ") msg.remove_prefix(6);
        throw GGUFError("gguf: " + path + ": " + std::string(msg));
    }
    return f;
}

GGUFFile::~GGUFFile() {
    if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
    auto it = kv_index_.find(std::string_view(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GGUFTensor* GGUFFile::tensor(const std::string& name) const {
    auto it = tensor_index_.find(std::string_view(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GGUFValue& GGUFFile::require(const std::string& key) const {
    const GGUFValue* v = find(key);
    if (!v) throw GGUFError("gguf: " + path_ + ": required metadata key '" + key + "' is missing");
    return *v;
}

namespace {
// Run a conversion of key's value; a GGUFError from it is re-thrown naming the key.
template <class F>
auto with_key(const std::string& key, F&& convert) -> decltype(convert()) {
    try {
        return convert();
    } catch (const GGUFError& e) {
        throw GGUFError("gguf: metadata key '" + key + "': " + e.what());
    }
}
}  // namespace

std::string GGUFFile::get_string(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] { return std::string(v.as_string()); });
}

std::string GGUFFile::get_string(const std::string& key, const std::string& dflt) const {
    return has(key) ? get_string(key) : dflt;
}

uint32_t GGUFFile::get_u32(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] {
        const uint64_t x = v.as_uint64();
        if (x > std::numeric_limits<uint32_t>::max())
            throw GGUFError("value " + u64s(x) + " does not fit uint32");
        return static_cast<uint32_t>(x);
    });
}

uint32_t GGUFFile::get_u32(const std::string& key, uint32_t dflt) const {
    return has(key) ? get_u32(key) : dflt;
}

uint64_t GGUFFile::get_u64(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] { return v.as_uint64(); });
}

uint64_t GGUFFile::get_u64(const std::string& key, uint64_t dflt) const {
    return has(key) ? get_u64(key) : dflt;
}

float GGUFFile::get_f32(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] { return static_cast<float>(v.as_double()); });
}

float GGUFFile::get_f32(const std::string& key, float dflt) const {
    return has(key) ? get_f32(key) : dflt;
}

bool GGUFFile::get_bool(const std::string& key, bool dflt) const {
    const GGUFValue* v = find(key);
    if (!v) return dflt;
    return with_key(key, [&] { return v->as_bool(); });
}

std::vector<float> GGUFFile::get_f32_array(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] {
        if (!v.is_array() || !gguf_scalar_size(v.elem_type) || v.elem_type == GGUFValueType::BOOL)
            throw GGUFError("expected an array of numbers, got " + v.type_string());
        std::vector<float> out(v.size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(v.float_at(i));
        return out;
    });
}

std::vector<int32_t> GGUFFile::get_i32_array(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] {
        if (!v.is_array() || !gguf_is_integer_type(v.elem_type))
            throw GGUFError("expected an array of integers, got " + v.type_string());
        std::vector<int32_t> out(v.size());
        for (size_t i = 0; i < out.size(); ++i) {
            const int64_t x = v.int_at(i);
            if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
                throw GGUFError("element " + u64s(i) + " = " + std::to_string(x) + " does not fit int32");
            out[i] = static_cast<int32_t>(x);
        }
        return out;
    });
}

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
    const GGUFValue& v = require(key);
    return with_key(key, [&] {
        if (!v.is_array() || v.elem_type != GGUFValueType::STRING)
            throw GGUFError("expected ARRAY[STRING], got " + v.type_string());
        return std::vector<std::string>(v.strings.begin(), v.strings.end());
    });
}

}  // namespace lll
