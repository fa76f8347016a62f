// dot_avx2.cpp — (placeholder during bring-up)
#include "dot_impl.h"
namespace lll { namespace kern {
const KernelSet* avx2_kernels(GGMLType) { return nullptr; }
} }
