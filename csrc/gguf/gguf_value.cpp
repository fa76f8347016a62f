// gguf_value.cpp — decoding GGUF metadata values in place (see gguf_value.h).
#include "gguf/gguf_value.h"

#include <string.h>

#include <limits>

namespace lll {

namespace {

// Little-endian load of a T from unaligned bytes (this reader only runs on little-endian hosts).
template <class T>
T load(const uint8_t* p) {
    T v;
    memcpy(&v, p, sizeof(T));
    return v;
}

// Any integer scalar widened to __int128, so every uint64 and int64 value is exact.
bool decode_integer(GGUFValueType t, const uint8_t* p, __int128* out) {
    switch (t) {
        case GGUFValueType::UINT8: *out = load<uint8_t>(p); return true;
        case GGUFValueType::INT8: *out = load<int8_t>(p); return true;
        case GGUFValueType::UINT16: *out = load<uint16_t>(p); return true;
        case GGUFValueType::INT16: *out = load<int16_t>(p); return true;
        case GGUFValueType::UINT32: *out = load<uint32_t>(p); return true;
        case GGUFValueType::INT32: *out = load<int32_t>(p); return true;
        case GGUFValueType::UINT64: *out = load<uint64_t>(p); return true;
        case GGUFValueType::INT64: *out = load<int64_t>(p); return true;
        default: return false;
    }
}

std::string describe(GGUFValueType t) { return gguf_value_type_name(t); }

std::string int128_to_string(__int128 v) {
    if (v == 0) return "0";
    const bool neg = v < 0;
    unsigned __int128 u = neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
    std::string s;
    while (u) {
        s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
        u /= 10;
    }
    return neg ? "-" + s : s;
}

int64_t integer_as_int64(GGUFValueType t, const uint8_t* p) {
    __int128 v;
    if (!decode_integer(t, p, &v)) throw GGUFError("value of type " + describe(t) + " is not an integer");
    if (v > std::numeric_limits<int64_t>::max())
        throw GGUFError("integer " + int128_to_string(v) + " does not fit int64");
    return static_cast<int64_t>(v);
}

uint64_t integer_as_uint64(GGUFValueType t, const uint8_t* p) {
    __int128 v;
    if (!decode_integer(t, p, &v)) throw GGUFError("value of type " + describe(t) + " is not an integer");
    if (v < 0) throw GGUFError("integer " + int128_to_string(v) + " is negative");
    return static_cast<uint64_t>(v);
}

double number_as_double(GGUFValueType t, const uint8_t* p) {
    if (t == GGUFValueType::FLOAT32) return load<float>(p);
    if (t == GGUFValueType::FLOAT64) return load<double>(p);
    __int128 v;
    if (!decode_integer(t, p, &v)) throw GGUFError("value of type " + describe(t) + " is not a number");
    return static_cast<double>(v);
}

}  // namespace

const char* gguf_value_type_name(GGUFValueType t) {
    static const char* const names[kGGUFValueTypeCount] = {
        "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
        "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    const uint32_t id = static_cast<uint32_t>(t);
    return id < kGGUFValueTypeCount ? names[id] : "unknown";
}

size_t gguf_scalar_size(GGUFValueType t) {
    switch (t) {
        case GGUFValueType::UINT8: case GGUFValueType::INT8: case GGUFValueType::BOOL: return 1;
        case GGUFValueType::UINT16: case GGUFValueType::INT16: return 2;
        case GGUFValueType::UINT32: case GGUFValueType::INT32: case GGUFValueType::FLOAT32: return 4;
        case GGUFValueType::UINT64: case GGUFValueType::INT64: case GGUFValueType::FLOAT64: return 8;
        default: return 0;
    }
}

bool gguf_is_integer_type(GGUFValueType t) {
    __int128 unused;
    static const uint8_t zeros[8] = {0};
    return decode_integer(t, zeros, &unused);
}

bool gguf_is_float_type(GGUFValueType t) {
    return t == GGUFValueType::FLOAT32 || t == GGUFValueType::FLOAT64;
}

std::string_view GGUFValue::as_string() const {
    if (type != GGUFValueType::STRING) throw GGUFError("expected STRING, got " + type_string());
    return std::string_view(reinterpret_cast<const char*>(raw), static_cast<size_t>(raw_len));
}

bool GGUFValue::as_bool() const {
    if (type != GGUFValueType::BOOL) throw GGUFError("expected BOOL, got " + type_string());
    return raw[0] != 0;
}

int64_t GGUFValue::as_int64() const {
    if (is_array()) throw GGUFError("expected an integer, got " + type_string());
    return integer_as_int64(type, raw);
}

uint64_t GGUFValue::as_uint64() const {
    if (is_array()) throw GGUFError("expected an integer, got " + type_string());
    return integer_as_uint64(type, raw);
}

double GGUFValue::as_double() const {
    if (is_array()) throw GGUFError("expected a number, got " + type_string());
    return number_as_double(type, raw);
}

namespace {
// Bytes of element i of a fixed-size array, after the array and index checks.
const uint8_t* fixed_element(const GGUFValue& v, size_t i) {
    if (!v.is_array()) throw GGUFError("expected an ARRAY, got " + v.type_string());
    if (i >= v.count)
        throw GGUFError("array index " + std::to_string(i) + " out of range (size " +
                        std::to_string(v.count) + ")");
    const size_t size = gguf_scalar_size(v.elem_type);
    if (size == 0) throw GGUFError("expected an array of numbers, got " + v.type_string());
    return v.raw + i * size;
}
}  // namespace

std::string_view GGUFValue::string_at(size_t i) const {
    if (type != GGUFValueType::ARRAY || elem_type != GGUFValueType::STRING)
        throw GGUFError("expected ARRAY[STRING], got " + type_string());
    if (i >= strings.size())
        throw GGUFError("array index " + std::to_string(i) + " out of range (size " +
                        std::to_string(strings.size()) + ")");
    return strings[i];
}

bool GGUFValue::bool_at(size_t i) const {
    if (type != GGUFValueType::ARRAY || elem_type != GGUFValueType::BOOL)
        throw GGUFError("expected ARRAY[BOOL], got " + type_string());
    return fixed_element(*this, i)[0] != 0;
}

int64_t GGUFValue::int_at(size_t i) const { return integer_as_int64(elem_type, fixed_element(*this, i)); }

uint64_t GGUFValue::uint_at(size_t i) const { return integer_as_uint64(elem_type, fixed_element(*this, i)); }

double GGUFValue::float_at(size_t i) const { return number_as_double(elem_type, fixed_element(*this, i)); }

const GGUFValue& GGUFValue::array_at(size_t i) const {
    if (type != GGUFValueType::ARRAY || elem_type != GGUFValueType::ARRAY)
        throw GGUFError("expected ARRAY[ARRAY], got " + type_string());
    if (i >= arrays.size())
        throw GGUFError("array index " + std::to_string(i) + " out of range (size " +
                        std::to_string(arrays.size()) + ")");
    return arrays[i];
}

std::string GGUFValue::type_string() const {
    if (!is_array()) return gguf_value_type_name(type);
    // An empty array of arrays has no element to describe the inner type by.
    if (elem_type == GGUFValueType::ARRAY && !arrays.empty())
        return "ARRAY[" + arrays[0].type_string() + "]";
    return std::string("ARRAY[") + gguf_value_type_name(elem_type) + "]";
}

bool is_valid_utf8(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t c = s[i];
        if (c < 0x80) { ++i; continue; }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return false;                      // stray continuation byte or 0xF8..0xFF
        if (n - i < len) return false;
        for (size_t k = 1; k < len; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_len[len]) return false;          // overlong encoding
        if (cp > 0x10FFFF) return false;
        if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // UTF-16 surrogate
        i += len;
    }
    return true;
}

}  // namespace lll
