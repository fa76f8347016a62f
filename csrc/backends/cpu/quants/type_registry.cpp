// type_registry.cpp — the one table of ggml tensor types (blocks.h's TypeTraits): layout,
// reference conversions (ref_*.cpp), dot-product kernel sets per ISA level (dot_*.cpp), the
// activation type each weight type pairs with and, for activation types, their quantizers per
// level (act_quant.cpp), and the block-sequential family the CPU backend repacks it for (bseq/).
//
// Everything else that lists types reads this table: quants.h's dequantize_row / quantize_row_ref
// / quantize_act_row, kern::find_kernels (and so vec_dot_fn, matmul), bseq::supported and
// can_repack, the GGUF reader's type names and checks, _core.types() and through it Python's
// GGMLType and the converter. The bseq kernel files' per-type switches are held to the table by
// the static_assert below; tests/test_type_dispatch.py calls every dispatch of every type.
#include "common/blocks.h"
#include "backends/cpu/quants/bseq/bseq.h"
#include "backends/cpu/quants/dot/dot_impl.h"
#include "backends/cpu/quants/ref/ref_rows.h"

namespace lll {

namespace {

using SetFn = const kern::KernelSet* (*)();

#if LLL_BUILD_AVX2
#define AVX2_SET(t) &kern::sets::avx2_##t
#define AVX2_ACT(t) &kern::act::avx2_##t
#else
#define AVX2_SET(t) nullptr
#define AVX2_ACT(t) nullptr
#endif
#if LLL_BUILD_AVX512
#define AVX512_SET(t) &kern::sets::avx512_##t
#define AVX512_ACT(t) &kern::act::avx512_##t
#else
#define AVX512_SET(t) nullptr
#define AVX512_ACT(t) nullptr
#endif
#if LLL_BUILD_NEON
#define NEON_SET(t) &kern::sets::neon_##t
#else
#define NEON_SET(t) nullptr
#endif
#if LLL_BUILD_DOTPROD
#define DOTPROD_SET(t) &kern::sets::dotprod_##t
#else
#define DOTPROD_SET(t) nullptr
#endif
#if LLL_BUILD_I8MM
#define I8MM_SET(t) &kern::sets::i8mm_##t
#else
#define I8MM_SET(t) nullptr
#endif

// An id ggml defines that this runtime does not support: its name only.
constexpr TypeTraits unsupported(uint32_t id, const char* name) {
    return {static_cast<GGMLType>(id), name, 0, 0, false, GGMLType::F32, nullptr, nullptr,
            {}, {}, BseqFamily::None};
}

// A plain element type: one element per block, no dot product unless given.
constexpr TypeTraits plain(GGMLType id, const char* name, int32_t bytes, ref::DequantizeFn deq,
                           ref::QuantizeFn q, SetFn scalar = nullptr, SetFn avx2 = nullptr,
                           SetFn avx512 = nullptr) {
    return {id, name, 1, bytes, false, id, deq, q, {scalar, avx2, avx512}, {}, BseqFamily::None};
}

// A block-quantized type multiplied with activations in `act`.
constexpr TypeTraits quant(GGMLType id, const char* name, int32_t elems, int32_t bytes, GGMLType act,
                           ref::DequantizeFn deq, ref::QuantizeFn q, SetFn scalar, SetFn avx2,
                           SetFn avx512, BseqFamily bseq) {
    return {id, name, elems, bytes, true, act, deq, q, {scalar, avx2, avx512}, {}, bseq};
}

// `t` as an activation type too: quantized per level by these (null: the level below's).
constexpr TypeTraits activation(TypeTraits t, ActQuantFn scalar, ActQuantFn avx2, ActQuantFn avx512) {
    t.act_quant[0] = scalar;
    t.act_quant[1] = avx2;
    t.act_quant[2] = avx512;
    return t;
}

// `t` with aarch64 kernel sets (Neon, Dotprod, I8mm; null: the level below's). Activations on aarch64
// are quantized by the scalar code (the same bytes as every x86 level's).
constexpr TypeTraits arm(TypeTraits t, SetFn neon, SetFn dotprod, SetFn i8mm = nullptr) {
    t.kernels[static_cast<int>(Isa::Neon)] = neon;
    t.kernels[static_cast<int>(Isa::Dotprod)] = dotprod;
    t.kernels[static_cast<int>(Isa::I8mm)] = i8mm;
    return t;
}

// `t` with an importance-weighted quantizer; `needs`: llama-quantize requires an imatrix for it.
constexpr TypeTraits weighted(TypeTraits t, ref::QuantizeWeightedFn qw, bool needs = false) {
    t.quantize_weighted = qw;
    t.needs_importance = needs;
    return t;
}

using T = GGMLType;
using B = BseqFamily;
namespace s = kern::sets;
namespace a = kern::act;

// Indexed by ggml type id (ggml.h's enum ggml_type; the GGUF file format).
constexpr TypeTraits kTypes[] = {
    arm(activation(plain(T::F32, "F32", 4, ref::dequantize_f32, ref::quantize_f32, s::scalar_f32, AVX2_SET(f32),
                     AVX512_SET(f32)),
               a::scalar_f32, nullptr, nullptr), NEON_SET(f32), nullptr),
    arm(activation(plain(T::F16, "F16", 2, ref::dequantize_f16, ref::quantize_f16, s::scalar_f16, AVX2_SET(f16),
                     AVX512_SET(f16)),
               a::scalar_f16, AVX2_ACT(f16), AVX512_ACT(f16)), NEON_SET(f16), nullptr),
    arm(weighted(quant(T::Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), T::Q8_0, ref::dequantize_q4_0, ref::quantize_q4_0,
          s::scalar_q4_0, AVX2_SET(q4_0), AVX512_SET(q4_0), B::Legacy), ref::quantize_weighted_q4_0), NEON_SET(q4_0), DOTPROD_SET(q4_0),
        I8MM_SET(q4_0)),
    arm(weighted(quant(T::Q4_1, "Q4_1", QK4_1, sizeof(block_q4_1), T::Q8_1, ref::dequantize_q4_1, ref::quantize_q4_1,
          s::scalar_q4_1, AVX2_SET(q4_1), AVX512_SET(q4_1), B::LegacyMin), ref::quantize_weighted_q4_1), NEON_SET(q4_1), DOTPROD_SET(q4_1),
        I8MM_SET(q4_1)),
    unsupported(4, "Q4_2"),
    unsupported(5, "Q4_3"),
    arm(weighted(quant(T::Q5_0, "Q5_0", QK5_0, sizeof(block_q5_0), T::Q8_0, ref::dequantize_q5_0, ref::quantize_q5_0,
          s::scalar_q5_0, AVX2_SET(q5_0), AVX512_SET(q5_0), B::Legacy), ref::quantize_weighted_q5_0), NEON_SET(q5_0), DOTPROD_SET(q5_0),
        I8MM_SET(q5_0)),
    weighted(quant(T::Q5_1, "Q5_1", QK5_1, sizeof(block_q5_1), T::Q8_1, ref::dequantize_q5_1, ref::quantize_q5_1,
          s::scalar_q5_1, AVX2_SET(q5_1), AVX512_SET(q5_1), B::LegacyMin), ref::quantize_weighted_q5_1),
    arm(activation(quant(T::Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), T::Q8_0, ref::dequantize_q8_0,
                     ref::quantize_q8_0, s::scalar_q8_0, AVX2_SET(q8_0), AVX512_SET(q8_0), B::Legacy),
               a::scalar_q8_0, AVX2_ACT(q8_0), AVX512_ACT(q8_0)), NEON_SET(q8_0), DOTPROD_SET(q8_0),
        I8MM_SET(q8_0)),
    // Activation-only formats: no weight kernels.
    activation(quant(T::Q8_1, "Q8_1", QK8_1, sizeof(block_q8_1), T::Q8_1, ref::dequantize_q8_1,
                     ref::quantize_q8_1, nullptr, nullptr, nullptr, B::None),
               a::scalar_q8_1, AVX2_ACT(q8_1), AVX512_ACT(q8_1)),
    weighted(quant(T::Q2_K, "Q2_K", QK_K, sizeof(block_q2_K), T::Q8_K, ref::dequantize_q2_K, ref::quantize_q2_K,
          s::scalar_q2_K, AVX2_SET(q2_K), AVX512_SET(q2_K), B::None), ref::quantize_weighted_q2_K),
    weighted(quant(T::Q3_K, "Q3_K", QK_K, sizeof(block_q3_K), T::Q8_K, ref::dequantize_q3_K, ref::quantize_q3_K,
          s::scalar_q3_K, AVX2_SET(q3_K), AVX512_SET(q3_K), B::None), ref::quantize_weighted_q3_K),
    arm(weighted(quant(T::Q4_K, "Q4_K", QK_K, sizeof(block_q4_K), T::Q8_K, ref::dequantize_q4_K, ref::quantize_q4_K,
          s::scalar_q4_K, AVX2_SET(q4_K), AVX512_SET(q4_K), B::KQuant), ref::quantize_weighted_q4_K), NEON_SET(q4_K), DOTPROD_SET(q4_K)),
    weighted(quant(T::Q5_K, "Q5_K", QK_K, sizeof(block_q5_K), T::Q8_K, ref::dequantize_q5_K, ref::quantize_q5_K,
          s::scalar_q5_K, AVX2_SET(q5_K), AVX512_SET(q5_K), B::KQuant), ref::quantize_weighted_q5_K),
    arm(weighted(quant(T::Q6_K, "Q6_K", QK_K, sizeof(block_q6_K), T::Q8_K, ref::dequantize_q6_K, ref::quantize_q6_K,
          s::scalar_q6_K, AVX2_SET(q6_K), AVX512_SET(q6_K), B::Q6K), ref::quantize_weighted_q6_K), NEON_SET(q6_K), DOTPROD_SET(q6_K)),
    activation(quant(T::Q8_K, "Q8_K", QK_K, sizeof(block_q8_K), T::Q8_K, ref::dequantize_q8_K,
                     ref::quantize_q8_K, nullptr, nullptr, nullptr, B::None),
               a::scalar_q8_K, AVX2_ACT(q8_K), AVX512_ACT(q8_K)),
    weighted(quant(T::IQ2_XXS, "IQ2_XXS", QK_K, sizeof(block_iq2_xxs), T::Q8_K, ref::dequantize_iq2_xxs,
                   nullptr, s::scalar_iq2_xxs, AVX2_SET(iq2_xxs), nullptr, B::None),
             ref::quantize_weighted_iq2_xxs, true),
    weighted(quant(T::IQ2_XS, "IQ2_XS", QK_K, sizeof(block_iq2_xs), T::Q8_K, ref::dequantize_iq2_xs,
                   nullptr, s::scalar_iq2_xs, AVX2_SET(iq2_xs), nullptr, B::None),
             ref::quantize_weighted_iq2_xs, true),
    weighted(quant(T::IQ3_XXS, "IQ3_XXS", QK_K, sizeof(block_iq3_xxs), T::Q8_K, ref::dequantize_iq3_xxs,
                   ref::quantize_iq3_xxs, s::scalar_iq3_xxs, AVX2_SET(iq3_xxs), nullptr, B::None),
             ref::quantize_weighted_iq3_xxs, true),
    unsupported(19, "IQ1_S"),
    weighted(quant(T::IQ4_NL, "IQ4_NL", QK4_NL, sizeof(block_iq4_nl), T::Q8_0, ref::dequantize_iq4_nl,
          ref::quantize_iq4_nl, s::scalar_iq4_nl, AVX2_SET(iq4_nl), nullptr, B::None), ref::quantize_weighted_iq4_nl),
    weighted(quant(T::IQ3_S, "IQ3_S", QK_K, sizeof(block_iq3_s), T::Q8_K, ref::dequantize_iq3_s,
                   ref::quantize_iq3_s, s::scalar_iq3_s, AVX2_SET(iq3_s), nullptr, B::None),
             ref::quantize_weighted_iq3_s, false),
    weighted(quant(T::IQ2_S, "IQ2_S", QK_K, sizeof(block_iq2_s), T::Q8_K, ref::dequantize_iq2_s,
                   ref::quantize_iq2_s, s::scalar_iq2_s, AVX2_SET(iq2_s), nullptr, B::None),
             ref::quantize_weighted_iq2_s, true),
    weighted(quant(T::IQ4_XS, "IQ4_XS", QK_K, sizeof(block_iq4_xs), T::Q8_K, ref::dequantize_iq4_xs,
          ref::quantize_iq4_xs, s::scalar_iq4_xs, AVX2_SET(iq4_xs), nullptr, B::None), ref::quantize_weighted_iq4_xs),
    // Integer and f64 tensors can be read as floats; f32 -> int has no ggml meaning.
    plain(T::I8, "I8", 1, ref::dequantize_i8, nullptr),
    plain(T::I16, "I16", 2, ref::dequantize_i16, nullptr),
    plain(T::I32, "I32", 4, ref::dequantize_i32, nullptr),
    plain(T::I64, "I64", 8, ref::dequantize_i64, nullptr),
    plain(T::F64, "F64", 8, ref::dequantize_f64, nullptr),
    unsupported(29, "IQ1_M"),
    activation(plain(T::BF16, "BF16", 2, ref::dequantize_bf16, ref::quantize_bf16, s::scalar_bf16,
                     AVX2_SET(bf16), AVX512_SET(bf16)),
               a::scalar_bf16, nullptr, AVX512_ACT(bf16)),
    unsupported(31, "Q4_0_4_4"),
    unsupported(32, "Q4_0_4_8"),
    unsupported(33, "Q4_0_8_8"),
    unsupported(34, "TQ1_0"),
    unsupported(35, "TQ2_0"),
    unsupported(36, "IQ4_NL_4_4"),
    unsupported(37, "IQ4_NL_4_8"),
    unsupported(38, "IQ4_NL_8_8"),
    unsupported(39, "MXFP4"),
    unsupported(40, "NVFP4"),
    unsupported(41, "Q1_0"),
    unsupported(42, "Q2_0"),
};
constexpr uint32_t kNumIds = sizeof(kTypes) / sizeof(kTypes[0]);

// The table is indexed by id: each entry must sit at its own id.
constexpr bool ids_in_place() {
    for (uint32_t i = 0; i < kNumIds; ++i)
        if (static_cast<uint32_t>(kTypes[i].id) != i) return false;
    return true;
}
static_assert(ids_in_place(), "every registry entry sits at its ggml type id");

// Every weight type with a dot product pairs with an activation type that has a scalar quantizer.
constexpr bool activations_quantizable() {
    for (const TypeTraits& t : kTypes)
        if (t.kernels[0] && !kTypes[static_cast<uint32_t>(t.vec_dot_type)].act_quant[0]) return false;
    return true;
}
static_assert(activations_quantizable(), "each weight type's vec_dot_type has an activation quantizer");

// The bseq kernel files switch over their types (template instantiations, bseq.h kBseqTypes):
// exactly the registry's block-sequential types, each with dot-product kernels to fall back on.
constexpr bool bseq_types_match() {
    int n = 0;
    for (const TypeTraits& t : kTypes) {
        if (t.bseq == BseqFamily::None) continue;
        bool listed = false;
        for (GGMLType b : bseq::kBseqTypes) listed = listed || b == t.id;
        if (!listed || !t.kernels[0]) return false;
        ++n;
    }
    return n == (int)(sizeof(bseq::kBseqTypes) / sizeof(bseq::kBseqTypes[0]));
}
static_assert(bseq_types_match(), "the registry's block-sequential types are bseq.h's kBseqTypes");

struct Supported {
    const TypeTraits* list[kNumIds];
    int n = 0;
    Supported() {
        for (const TypeTraits& t : kTypes)
            if (t.block_elems > 0) list[n++] = &t;
    }
};

}  // namespace

const TypeTraits* type_traits(uint32_t id) {
    if (id >= kNumIds || kTypes[id].block_elems == 0) return nullptr;
    return &kTypes[id];
}

const char* ggml_type_name(uint32_t id) { return id < kNumIds ? kTypes[id].name : nullptr; }

const TypeTraits* const* supported_types(int* count) {
    static const Supported supported;
    *count = supported.n;
    return supported.list;
}

}  // namespace lll
