// dot_avx512.cpp — (placeholder during bring-up)
#include "dot_impl.h"
namespace lll { namespace kern {
const KernelSet* avx512_kernels(GGMLType) { return nullptr; }
} }
