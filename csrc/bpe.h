// bpe.h — byte-level BPE merging (GGUF tokenizer.ggml.model == "gpt2") as llama.cpp does it.
//
// A word (already pre-split and spelled byte-level by python/localllm/tokenizer_pretok.py) starts
// as one symbol per UTF-8 character; the adjacent pair with the lowest merge rank is merged,
// leftmost first among equal ranks, until no adjacent pair is a merge. Characters that are not
// tokens are dropped. Built in C++ because the table must be ready at load: a 151k-merge
// vocabulary took ~0.55 s through the `tokenizers` library (its constructor plus the Python
// around it), more than llama.cpp's whole model load; here ~0.23 s, the Python strings'
// conversion included (most of the rest: hash-map cache misses, three lookups per merge).
#pragma once
#include <stdint.h>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lll {

class BpeMerges {
public:
    // tokens: the vocabulary (the first id wins for a repeated text); merges: "left right" lines,
    // split at the first space after the first character (llama.cpp's rule), the first line of
    // a repeated pair keeping its rank; a merge naming text outside the vocabulary is ignored.
    // ignore_merges: a word that is itself a token is emitted whole (llama3's pre-tokenizer).
    BpeMerges(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
              bool ignore_merges);
    BpeMerges(const BpeMerges&) = delete;              // ids_ views point into texts_
    BpeMerges& operator=(const BpeMerges&) = delete;

    // Appends the ids of each word, merged on its own.
    void encode_words(const std::vector<std::string>& words, std::vector<int32_t>& out) const;
    // Id of the token whose text is exactly `text`, or -1.
    int32_t token_id(std::string_view text) const;
    size_t n_merges() const { return merges_.size(); }

private:
    std::string texts_;                                    // every token's text, end to end
    std::unordered_map<std::string_view, int32_t> ids_;    // views into texts_ -> first id
    std::unordered_map<uint64_t, uint64_t> merges_;   // left id << 32 | right id -> rank << 32 | merged id
    bool ignore_merges_;

    void encode_word(std::string_view word, std::vector<int32_t>& out) const;
};

}  // namespace lll
