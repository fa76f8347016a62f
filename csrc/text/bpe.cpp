// bpe.cpp — see bpe.h.
#include "text/bpe.h"
#include <queue>
#include <stdexcept>
#include <tuple>

namespace lll {

namespace {

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t)(uint32_t)left << 32 | (uint32_t)right; }

// Length of the UTF-8 character starting with byte c (1 for a stray continuation byte).
size_t utf8_len(unsigned char c) {
    if (c >= 0xF0) return 4;
    if (c >= 0xE0) return 3;
    if (c >= 0xC0) return 2;
    return 1;
}

// Table sizes: a power of two at least twice the entries.
size_t table_size(size_t n) {
    size_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

uint64_t mix(uint64_t k) {   // splitmix64's finalizer: spreads the pair keys over the table
    k ^= k >> 30; k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27; k *= 0x94d049bb133111ebull;
    return k ^ (k >> 31);
}

}  // namespace

BpeMerges::BpeMerges(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                     bool ignore_merges)
    : ignore_merges_(ignore_merges) {
    size_t total = 0;
    for (const std::string& t : tokens) total += t.size();
    if (total >= UINT32_MAX || tokens.size() >= (size_t)INT32_MAX)
        throw std::invalid_argument("BPE vocabulary too large");
    texts_.reserve(total);
    text_start_.reserve(tokens.size() + 1);
    text_start_.push_back(0);
    for (const std::string& t : tokens) {
        texts_ += t;
        text_start_.push_back((uint32_t)texts_.size());
    }
    id_slots_.assign(table_size(tokens.size()), -1);
    const size_t mask = id_slots_.size() - 1;
    for (int32_t id = 0; id < (int32_t)tokens.size(); ++id) {   // the first id of a text wins
        for (size_t i = std::hash<std::string_view>{}(text(id)) & mask;; i = (i + 1) & mask) {
            if (id_slots_[i] < 0) { id_slots_[i] = id; break; }
            if (text(id_slots_[i]) == text(id)) break;
        }
    }
    pair_keys_.assign(table_size(merges.size()), 0);
    pair_values_.assign(pair_keys_.size(), kEmpty);
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string& line = merges[rank];
        const size_t cut = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
        if (cut == std::string::npos || cut + 1 >= line.size()) continue;
        const std::string_view left(line.data(), cut), right(line.data() + cut + 1, line.size() - cut - 1);
        const int32_t a = token_id(left), b = token_id(right);
        if (a < 0 || b < 0) continue;
        joined.assign(left);
        joined.append(right);
        const int32_t ab = token_id(joined);
        if (ab >= 0) add_merge(pair_key(a, b), (uint64_t)rank << 32 | (uint32_t)ab);
    }
}

void BpeMerges::add_merge(uint64_t key, uint64_t value) {
    const size_t mask = pair_keys_.size() - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
        if (pair_values_[i] == kEmpty) {
            pair_keys_[i] = key;
            pair_values_[i] = value;
            ++n_merges_;
            return;
        }
        if (pair_keys_[i] == key) return;                 // a repeated pair keeps its first rank
    }
}

uint64_t BpeMerges::find_merge(uint64_t key) const {
    const size_t mask = pair_keys_.size() - 1;
    for (size_t i = mix(key) & mask; pair_values_[i] != kEmpty; i = (i + 1) & mask)
        if (pair_keys_[i] == key) return pair_values_[i];
    return kEmpty;
}

int32_t BpeMerges::token_id(std::string_view t) const {
    const size_t mask = id_slots_.size() - 1;
    for (size_t i = std::hash<std::string_view>{}(t) & mask; id_slots_[i] >= 0; i = (i + 1) & mask)
        if (text(id_slots_[i]) == t) return id_slots_[i];
    return -1;
}

void BpeMerges::encode_words(const std::vector<std::string>& words, std::vector<int32_t>& out) const {
    for (const std::string& w : words) encode_word(w, out);
}

void BpeMerges::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        const int32_t whole = token_id(word);
        if (whole >= 0) {
            out.push_back(whole);
            return;
        }
    }
    // Symbols as a doubly linked list over the characters that are tokens.
    struct Symbol { int32_t id; int prev, next; };
    std::vector<Symbol> sym;
    for (size_t i = 0; i < word.size();) {
        const size_t n = std::min(utf8_len((unsigned char)word[i]), word.size() - i);
        const int32_t id = token_id(word.substr(i, n));
        if (id >= 0) sym.push_back({id, (int)sym.size() - 1, (int)sym.size() + 1});
        i += n;
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    // Candidate merges, lowest rank first, then leftmost; stale entries are skipped when popped.
    using Candidate = std::tuple<uint32_t, int, int32_t, int32_t>;   // rank, left index, left id, right id
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int left) {
        if (left < 0 || sym[left].next < 0) return;
        const Symbol& a = sym[left];
        const uint64_t merge = find_merge(pair_key(a.id, sym[a.next].id));
        if (merge != kEmpty) queue.emplace((uint32_t)(merge >> 32), left, a.id, sym[a.next].id);
    };
    for (int i = 0; i + 1 < (int)sym.size(); ++i) consider(i);
    while (!queue.empty()) {
        const auto [rank, left, left_id, right_id] = queue.top();
        queue.pop();
        Symbol& a = sym[left];
        if (a.id != left_id || a.next < 0 || sym[a.next].id != right_id) continue;   // stale
        const int right = a.next;
        a.id = (int32_t)(uint32_t)find_merge(pair_key(left_id, right_id));
        a.next = sym[right].next;
        if (a.next >= 0) sym[a.next].prev = left;
        sym[right].id = -1;                                  // removed
        consider(a.prev);
        consider(left);
    }
    for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace lll
