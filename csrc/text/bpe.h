// bpe.h — byte-level BPE merging (GGUF tokenizer.ggml.model == "gpt2") as llama.cpp does it.
//
// A word (already pre-split and spelled byte-level by python/localllm/tokenizer_pretok.py) starts
// as one symbol per UTF-8 character; the adjacent pair with the lowest merge rank is merged,
// leftmost first among equal ranks, until no adjacent pair is a merge. Characters that are not
// tokens are dropped. Built in C++ because the table must be ready at load: a 151k-merge
// vocabulary took ~0.55 s through the `tokenizers` library (its constructor plus the Python
// around it), more than llama.cpp's whole model load; here 0.08 s, the Python strings'
// conversion included.
#pragma once
#include <stdint.h>
#include <string>
#include <string_view>
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

    // Appends the ids of each word, merged on its own.
    void encode_words(const std::vector<std::string>& words, std::vector<int32_t>& out) const;
    // Id of the token whose text is exactly `text`, or -1.
    int32_t token_id(std::string_view text) const;
    size_t n_merges() const { return n_merges_; }

private:
    // Both tables are open-addressed (linear probing, power-of-two sizes, at most half full):
    // with node-based std::unordered_map, chasing nodes was 60% of building Qwen2.5's table.
    std::string texts_;                  // every token's text, end to end
    std::vector<uint32_t> text_start_;   // [n_tokens + 1] offsets into texts_
    std::vector<int32_t> id_slots_;      // text table: token id or -1 (empty)
    std::vector<uint64_t> pair_keys_;    // merge table: left id << 32 | right id
    std::vector<uint64_t> pair_values_;  // rank << 32 | merged id, or kEmpty
    size_t n_merges_ = 0;
    bool ignore_merges_;

    static constexpr uint64_t kEmpty = ~0ull;
    std::string_view text(int32_t id) const {
        return std::string_view(texts_.data() + text_start_[id], text_start_[id + 1] - text_start_[id]);
    }
    void add_merge(uint64_t key, uint64_t value);       // keeps the first value of a key
    uint64_t find_merge(uint64_t key) const;            // kEmpty if absent

    void encode_word(std::string_view word, std::vector<int32_t>& out) const;
};

}  // namespace lll
