// registry.cpp — the one place architectures are registered.
#include <string>
#include "model/model.h"

namespace lll {

extern const ArchSpec kBertArch;
extern const ArchSpec kLlamaArch;
extern const ArchSpec kNomicBertArch;
extern const ArchSpec kQwen2Arch;
extern const ArchSpec kQwen3Arch;
extern const ArchSpec kQwen3MoeArch;
extern const ArchSpec kPhi3Arch;
extern const ArchSpec kGemma2Arch;
extern const ArchSpec kGemma3Arch;

static const ArchSpec* const kArchs[] = {&kBertArch, &kGemma2Arch, &kGemma3Arch, &kLlamaArch, &kNomicBertArch, &kPhi3Arch, &kQwen2Arch, &kQwen3Arch,
                                          &kQwen3MoeArch};

const ArchSpec* find_arch(const std::string& name) {
    for (const ArchSpec* a : kArchs)
        if (name == a->name) return a;
    return nullptr;
}

std::string supported_archs() {
    std::string s;
    for (const ArchSpec* a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a->name);
    return s;
}

}  // namespace lll
