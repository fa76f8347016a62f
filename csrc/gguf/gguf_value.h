// gguf_value.h — one GGUF metadata value, read in place from the mapped file.
//
// Values never copy the file: scalars, strings and arrays of fixed-size elements keep a pointer
// into the read-only mapping (little-endian, possibly unaligned, decoded on access with memcpy).
// Only arrays of strings (one string_view per element) and arrays of arrays (one GGUFValue per
// element) own a vector, and the parser sizes those vectors only after checking that the file
// really holds that many encoded elements. A GGUFValue is valid while its GGUFFile lives.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lll {

// Every malformed-file condition: the message names the field and the offending value.
class GGUFError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// GGUF metadata value type ids as stored in the file (never renumber: they are the format).
enum class GGUFValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
constexpr uint32_t kGGUFValueTypeCount = 13;

// "UINT8", ..., "FLOAT64"; "unknown" for ids >= kGGUFValueTypeCount.
const char* gguf_value_type_name(GGUFValueType t);
// Encoded size of one scalar of this type; 0 for STRING and ARRAY (variable length).
size_t gguf_scalar_size(GGUFValueType t);
// The type is one of the 8 integer types (BOOL is not an integer here).
bool gguf_is_integer_type(GGUFValueType t);
bool gguf_is_float_type(GGUFValueType t);

struct GGUFValue {
    GGUFValueType type = GGUFValueType::UINT8;
    GGUFValueType elem_type = GGUFValueType::UINT8;   // ARRAY only: type of the elements
    uint64_t count = 0;              // ARRAY only: number of elements
    const uint8_t* raw = nullptr;    // scalar: its bytes; STRING: its bytes;
                                     // ARRAY of fixed-size elements: count * size element bytes
    uint64_t raw_len = 0;            // bytes at raw (STRING: the string length)
    std::vector<std::string_view> strings;   // ARRAY of STRING: one view per element
    std::vector<GGUFValue> arrays;           // ARRAY of ARRAY: one value per element

    bool is_array() const { return type == GGUFValueType::ARRAY; }
    // Number of elements of an array (0 for scalars).
    size_t size() const { return is_array() ? static_cast<size_t>(count) : 0; }

    // Scalar accessors; each throws GGUFError when the type does not fit the request.
    std::string_view as_string() const;      // STRING
    bool as_bool() const;                    // BOOL
    int64_t as_int64() const;                // any integer type whose value fits int64
    uint64_t as_uint64() const;              // any integer type whose value is >= 0
    double as_double() const;                // FLOAT32/FLOAT64 or any integer type

    // Element accessors of an ARRAY (index checked), same conversion rules as the scalars.
    std::string_view string_at(size_t i) const;
    bool bool_at(size_t i) const;
    int64_t int_at(size_t i) const;
    uint64_t uint_at(size_t i) const;
    double float_at(size_t i) const;
    const GGUFValue& array_at(size_t i) const;

    // Human-readable type: "UINT32", "ARRAY[STRING]", "ARRAY[ARRAY[INT32]]".
    std::string type_string() const;
};

// One metadata entry; key points into the mapping.
struct GGUFKeyValue {
    std::string_view key;
    GGUFValue value;
};

// RFC 3629 UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(const uint8_t* s, size_t n);

}  // namespace lll
