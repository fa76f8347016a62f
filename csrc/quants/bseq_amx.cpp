// bseq_amx.cpp — block-sequential matmul on AMX tiles (filled in below when compiled with AMX).
#include "bseq_panel.h"

namespace lll {
namespace bseq {

bool amx_available() { return false; }

int64_t amx_rows(GGMLType, const Panel&, int64_t, const ActPack&, int64_t m, int64_t, float*, int64_t,
                 uint16_t) {
    return m;
}

}  // namespace bseq
}  // namespace lll
