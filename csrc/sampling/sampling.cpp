// sampling.cpp — llama.cpp-style sampler chain over one row of logits.
//
// Cost model: vocabularies reach 262,144 entries and this runs once per generated token, so no
// step sorts the whole vocabulary. Full-vocabulary passes (copy, max, exp-sum) run on 16-lane
// vectors; top-k is a bounded heap that skips whole blocks whose maximum cannot enter it;
// min-p without top-k gathers the tokens above its logit threshold; top-p without top-k finds
// its boundary with a histogram of the weights and sorts only the boundary bucket.
#include "sampling/sampling.h"

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace lll {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kBlock = 128;       // block-skipping scans: skip blocks whose max is too low
constexpr size_t kSumBlock = 1024;   // float partial sums per block, double across blocks
constexpr size_t kSortableCandidates = 16384;  // min-p survivors sorted directly up to this

// ---- 16-lane vectors (GCC / Clang vector extensions: AVX-512, 2x AVX2 or 4x SSE as the
// target allows). Every vector function has a scalar twin below it that is its reference and
// handles the tails.
typedef float f32v __attribute__((vector_size(64)));
typedef int32_t i32v __attribute__((vector_size(64)));
constexpr size_t kVec = 16;

inline f32v splat(float v) { return f32v{} + v; }
inline f32v load(const float* p) {
    f32v v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline void store(float* p, f32v v) { std::memcpy(p, &v, sizeof(v)); }
inline float lane_max(f32v v) {
    float m = v[0];
    for (size_t l = 1; l < kVec; ++l) m = v[l] > m ? v[l] : m;
    return m;
}
inline float lane_sum(f32v v) {
    float s = 0.0f;
    for (size_t l = 0; l < kVec; ++l) s += v[l];
    return s;
}

// exp(x): 0 for x < -87 (including -inf), valid up to 88.
// x = k*ln2 + r with k = round(x*log2(e)) (adding 1.5*2^23 rounds to an integer that then sits
// in the low mantissa bits), |r| <= ln2/2; e^r by its degree-6 Taylor polynomial (truncation
// error |r|^7/7! < 1.3e-7 relative); 2^k built in the exponent bits. ln2 is split in a part
// exact in float and a small correction (Cody-Waite) so r keeps full precision.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kRoundShifter = 12582912.0f;  // 1.5 * 2^23
constexpr int32_t kRoundShifterBits = 0x4B400000;

inline f32v exp_fast(f32v x) {
    const i32v underflow = x < -87.0f;
    x = x > splat(-87.0f) ? x : splat(-87.0f);
    x = x < splat(88.0f) ? x : splat(88.0f);
    const f32v t = x * kLog2e + kRoundShifter;
    const f32v k = t - kRoundShifter;
    const i32v k_int = (i32v)t - kRoundShifterBits;
    const f32v r = (x - k * kLn2Hi) - k * kLn2Lo;
    f32v p = splat(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const f32v scale = (f32v)((k_int + 127) << 23);
    return (f32v)((i32v)(p * scale) & ~underflow);
}

inline float exp_fast(float x) {  // scalar reference of the vector exp_fast
    const bool underflow = x < -87.0f;
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    const float t = x * kLog2e + kRoundShifter;
    const float k = t - kRoundShifter;
    int32_t t_bits;
    std::memcpy(&t_bits, &t, sizeof(t_bits));
    const float r = (x - k * kLn2Hi) - k * kLn2Lo;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t scale_bits = (t_bits - kRoundShifterBits + 127) << 23;
    float scale;
    std::memcpy(&scale, &scale_bits, sizeof(scale));
    return underflow ? 0.0f : p * scale;
}

// Largest value of x[0..n) (NaN ignored); sets *has_nan when any element is NaN.
float max_value(const float* x, size_t n, bool* has_nan) {
    f32v vmax = splat(-kInf);
    i32v vnan = i32v{};
    size_t i = 0;
    for (; i + kVec <= n; i += kVec) {
        const f32v v = load(x + i);
        vmax = v > vmax ? v : vmax;
        vnan |= v != v;
    }
    float m = lane_max(vmax);
    bool nan_seen = false;
    for (size_t l = 0; l < kVec; ++l) nan_seen |= vnan[l] != 0;
    for (size_t j = i; j < n; ++j) {  // scalar reference / tail
        m = x[j] > m ? x[j] : m;
        nan_seen |= x[j] != x[j];
    }
    if (has_nan) *has_nan = nan_seen;
    return m;
}

// sum_i exp((x[i] - shift) * scale). With kStore also writes each term to out[i] and the sum of
// each kSumBlock-long block to block_sums[block].
template <bool kStore>
double sum_exp(const float* x, size_t n, float shift, float scale, float* out, float* block_sums) {
    double total = 0.0;
    for (size_t start = 0; start < n; start += kSumBlock) {
        const size_t end = std::min(n, start + kSumBlock);
        f32v acc = f32v{};
        size_t i = start;
        for (; i + kVec <= end; i += kVec) {
            const f32v w = exp_fast((load(x + i) - shift) * scale);
            if (kStore) store(out + i, w);
            acc += w;
        }
        float block_sum = lane_sum(acc);
        for (; i < end; ++i) {  // scalar reference / tail
            const float w = exp_fast((x[i] - shift) * scale);
            if (kStore) out[i] = w;
            block_sum += w;
        }
        if (kStore) block_sums[start / kSumBlock] = block_sum;
        total += block_sum;
    }
    return total;
}

// Largest value of one full block x[0..kBlock).
inline float block_max(const float* x) {
    static_assert(kBlock % kVec == 0, "blocks are whole vectors");
    f32v vmax = load(x);
    for (size_t i = kVec; i < kBlock; i += kVec) {
        const f32v v = load(x + i);
        vmax = v > vmax ? v : vmax;
    }
    return lane_max(vmax);
}

// Bit l set iff x[l] >= threshold, for l < kVec.
inline uint32_t at_least_mask(const float* x, float threshold) {
#if defined(__AVX512F__)
    return _mm512_cmp_ps_mask(_mm512_loadu_ps(x), _mm512_set1_ps(threshold), _CMP_GE_OQ);
#elif defined(__AVX__)
    const __m256 t = _mm256_set1_ps(threshold);
    const uint32_t lo = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x), t, _CMP_GE_OQ)));
    const uint32_t hi = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + 8), t, _CMP_GE_OQ)));
    return lo | (hi << 8);
#else
    uint32_t mask = 0;  // scalar reference
    for (size_t l = 0; l < kVec; ++l) mask |= static_cast<uint32_t>(x[l] >= threshold) << l;
    return mask;
#endif
}

// Calls fn(i) for every i with x[i] >= threshold, in increasing i. Skips whole blocks whose max
// is below the threshold; inside a block, walks the set bits of a per-vector comparison mask so
// that sparse hits cost no per-element branch.
template <typename Fn>
void for_each_at_least(const float* x, size_t n, float threshold, Fn&& fn) {
    size_t start = 0;
    for (; start + kBlock <= n; start += kBlock) {
        if (block_max(x + start) < threshold) continue;
        for (size_t i = start; i < start + kBlock; i += kVec) {
            uint32_t mask = at_least_mask(x + i, threshold);
            while (mask) {
                fn(i + static_cast<size_t>(__builtin_ctz(mask)));
                mask &= mask - 1;
            }
        }
    }
    for (size_t i = start; i < n; ++i)  // scalar reference / tail
        if (x[i] >= threshold) fn(i);
}

// Candidate order: higher logit first, ties -> lower token id.
inline bool ranks_before(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

// The k best entries of x[0..n) (1 <= k <= n) into out, sorted by ranks_before.
void select_top_k(const float* x, size_t n, size_t k, std::vector<Candidate>& out) {
    out.clear();
    for (size_t i = 0; i < k; ++i) out.push_back({x[i], static_cast<int>(i)});
    // With ranks_before as "less", the heap front is the candidate that ranks last.
    std::make_heap(out.begin(), out.end(), ranks_before);
    float threshold = out.front().logit;
    for (size_t start = k; start < n; start += kBlock) {
        const size_t end = std::min(n, start + kBlock);
        const float max_here = end - start == kBlock ? block_max(x + start) : max_value(x + start, end - start, nullptr);
        // Every id here is above every id in the heap, so a tie with the threshold loses.
        if (!(max_here > threshold)) continue;
        for (size_t i = start; i < end; ++i) {
            if (x[i] > threshold) {
                std::pop_heap(out.begin(), out.end(), ranks_before);
                out.back() = {x[i], static_cast<int>(i)};
                std::push_heap(out.begin(), out.end(), ranks_before);
                threshold = out.front().logit;
            }
        }
    }
    std::sort(out.begin(), out.end(), ranks_before);
}

// out[i] = allowed bit i ? x[i] : -inf, for i < n. Whole words of 32 tokens that are all
// allowed (a copy) or all masked (a fill) take no per-token test: grammar masks are mostly
// one or the other over long runs of the vocabulary.
void copy_allowed(const float* x, const uint32_t* allowed, float* out, size_t n) {
    const size_t full_words = n / 32;
    for (size_t w = 0; w < full_words; ++w) {
        const uint32_t bits = allowed[w];
        float* dst = out + w * 32;
        if (bits == 0xFFFFFFFFu) {
            std::memcpy(dst, x + w * 32, 32 * sizeof(float));
        } else if (bits == 0) {
            std::fill(dst, dst + 32, -kInf);
        } else {
            for (size_t b = 0; b < 32; ++b) dst[b] = (bits >> b) & 1u ? x[w * 32 + b] : -kInf;
        }
    }
    for (size_t i = full_words * 32; i < n; ++i) out[i] = (allowed[i / 32] >> (i % 32)) & 1u ? x[i] : -kInf;
}

std::string describe(const char* name, const std::string& requirement, double got) {
    return std::string("sampling parameter ") + name + " " + requirement + ", got " +
           std::to_string(got);
}

}  // namespace

void validate_sampling_params(const SamplingParams& p, int n_vocab) {
    if (n_vocab <= 0) throw std::invalid_argument(describe("n_vocab", "must be > 0", n_vocab));
    if (!std::isfinite(p.temperature))
        throw std::invalid_argument(describe("temperature", "must be a finite number", p.temperature));
    if (p.top_k < 0)
        throw std::invalid_argument(describe("top_k", "must be >= 0 (0 disables it)", p.top_k));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
        throw std::invalid_argument(describe("top_p", "must be in (0, 1]", p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        throw std::invalid_argument(describe("min_p", "must be in [0, 1]", p.min_p));
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
        throw std::invalid_argument(describe("repeat_penalty", "must be a finite number > 0", p.repeat_penalty));
    if (!std::isfinite(p.presence_penalty))
        throw std::invalid_argument(describe("presence_penalty", "must be a finite number", p.presence_penalty));
    if (!std::isfinite(p.frequency_penalty))
        throw std::invalid_argument(describe("frequency_penalty", "must be a finite number", p.frequency_penalty));
    if (p.penalty_last_n < -1)
        throw std::invalid_argument(describe("penalty_last_n", "must be >= -1", p.penalty_last_n));
    for (const auto& [token, bias] : p.logit_bias) {
        if (token < 0 || token >= n_vocab)
            throw std::invalid_argument("sampling parameter logit_bias: token " + std::to_string(token) +
                                        " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        if (std::isnan(bias) || bias == kInf)
            throw std::invalid_argument("sampling parameter logit_bias: bias of token " + std::to_string(token) +
                                        " must be a number or -inf, got " + std::to_string(bias));
    }
    if (p.n_logprobs < -1 || p.n_logprobs > n_vocab)
        throw std::invalid_argument(describe("n_logprobs", "must be in [-1, n_vocab]", p.n_logprobs));
}

class Sampler::BusyGuard {
public:
    explicit BusyGuard(std::atomic<bool>& busy) : busy_(busy) {
        if (busy_.exchange(true))
            throw std::runtime_error("Sampler used from two threads at once (use one sampler per sequence)");
    }
    ~BusyGuard() { busy_.store(false); }
    BusyGuard(const BusyGuard&) = delete;
    BusyGuard& operator=(const BusyGuard&) = delete;

private:
    std::atomic<bool>& busy_;
};

Sampler::Sampler(const SamplingParams& params, int n_vocab) : params_(params), n_vocab_(n_vocab) {
    validate_sampling_params(params_, n_vocab_);
    work_.resize(static_cast<size_t>(n_vocab_));
    reset();
}

void Sampler::reset() {
    BusyGuard guard(busy_);
    history_.clear();
    history_start_ = 0;
    token_counts_.clear();
    std::seed_seq seq{static_cast<uint32_t>(params_.seed), static_cast<uint32_t>(params_.seed >> 32)};
    rng_.seed(seq);
    has_logprobs_ = false;
    last_top_.clear();
}

void Sampler::accept(int token) {
    BusyGuard guard(busy_);
    if (token < 0 || token >= n_vocab_)
        throw std::invalid_argument("Sampler.accept: token " + std::to_string(token) +
                                    " is outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
    if (params_.penalty_last_n == 0) return;
    const size_t capacity = static_cast<size_t>(params_.penalty_last_n);  // -1: unbounded
    if (params_.penalty_last_n > 0 && history_.size() == capacity) {
        const int evicted = history_[history_start_];
        history_[history_start_] = token;
        history_start_ = (history_start_ + 1) % capacity;
        if (--token_counts_[evicted] == 0) token_counts_.erase(evicted);
    } else {
        history_.push_back(token);
    }
    ++token_counts_[token];
}

int Sampler::sample(const float* logits, const uint32_t* allowed) {
    BusyGuard guard(busy_);
    has_logprobs_ = false;
    int fast_token;
    if (allowed == nullptr && greedy_without_copy(logits, &fast_token)) return fast_token;
    prepare_row(logits, allowed);

    int token;
    if (params_.temperature <= 0.0f) {
        token = sample_greedy();
    } else {
        select_candidates();
        token = candidates_.empty() ? draw_from_full_vocab() : draw_from_candidates();
    }
    finish_logprob(token);
    return token;
}

// The chain's steps before truncation: row_ = biased logits (logprob stats), then penalties.
void Sampler::prepare_row(const float* logits, const uint32_t* allowed) {
    load_biased_logits(logits, allowed);
    if (params_.n_logprobs >= 0) compute_logprob_stats();
    apply_penalties();
}

void Sampler::finish_logprob(int token) {
    if (params_.n_logprobs < 0) return;
    float biased = row_[static_cast<size_t>(token)];
    for (const auto& [id, value] : pre_penalty_)
        if (id == token) biased = value;
    last_logprob_ = biased - logsumexp_;
    has_logprobs_ = true;
}

std::vector<std::pair<int, double>> Sampler::distribution(const float* logits, const uint32_t* allowed) {
    BusyGuard guard(busy_);
    prepare_row(logits, allowed);
    std::vector<std::pair<int, double>> out;
    build_distribution(out);
    return out;
}

// After prepare_row: the probabilities the draws of sample() use, from the same weights
// (exp_fast of the tempered logits, relative to the best candidate or the row's maximum).
void Sampler::build_distribution(std::vector<std::pair<int, double>>& out) {
    out.clear();
    if (params_.temperature <= 0.0f) {
        out.push_back({sample_greedy(), 1.0});
        return;
    }
    const float inv_temp = 1.0f / params_.temperature;
    select_candidates();
    if (candidates_.empty()) {
        const size_t n = work_.size();
        weights_.resize(n);
        block_sums_.resize((n + kSumBlock - 1) / kSumBlock);
        const double total = sum_exp<true>(row_, n, work_max_, inv_temp, weights_.data(), block_sums_.data());
        for (size_t i = 0; i < n; ++i)
            if (weights_[i] > 0.0f) out.push_back({static_cast<int>(i), weights_[i] / total});
        return;
    }
    const Candidate* best = &candidates_.front();
    for (const Candidate& c : candidates_)
        if (ranks_before(c, *best)) best = &c;
    double total = 0.0;
    for (const Candidate& c : candidates_) total += exp_fast((c.logit - best->logit) * inv_temp);
    for (const Candidate& c : candidates_) {
        const float w = exp_fast((c.logit - best->logit) * inv_temp);
        if (w > 0.0f) out.push_back({c.token, w / total});
    }
}

std::pair<int, bool> Sampler::verify(const float* logits, int draft, const std::vector<std::pair<int, float>>& q,
                                     const uint32_t* allowed) {
    BusyGuard guard(busy_);
    has_logprobs_ = false;
    if (draft < 0 || draft >= n_vocab_)
        throw std::invalid_argument("Sampler.verify: drafted token " + std::to_string(draft) +
                                    " is outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
    double q_draft = q.empty() ? 1.0 : 0.0, q_total = 0.0;
    for (const auto& [token, prob] : q) {
        if (token < 0 || token >= n_vocab_ || !(prob >= 0.0f) || !std::isfinite(prob))
            throw std::invalid_argument("Sampler.verify: the proposal must map tokens of the vocabulary "
                                        "to probabilities >= 0");
        if (token == draft) q_draft += prob;
        q_total += prob;
    }
    if (!(q_draft > 0.0) || q_total > 1.0 + 1e-4)
        throw std::invalid_argument("Sampler.verify: the proposal must give the drafted token a probability "
                                    "> 0 and sum to at most 1");
    prepare_row(logits, allowed);
    build_distribution(dist_);
    double p_draft = 0.0;
    for (const auto& [token, prob] : dist_)
        if (token == draft) p_draft = prob;
    const double u = std::generate_canonical<double, 53>(rng_);
    const bool accepted = u * q_draft < p_draft;   // u < p(d) / q(d)
    const int token = accepted ? draft : draw_residual(q, draft);
    finish_logprob(token);
    return {token, accepted};
}

// A draw from norm(max(0, p - q)) over dist_ (p); tokens outside p's support have p = 0 there.
int Sampler::draw_residual(const std::vector<std::pair<int, float>>& q, int draft) {
    std::unordered_map<int, double> q_of;
    if (q.empty()) q_of[draft] = 1.0;
    for (const auto& [token, prob] : q) q_of[token] += prob;
    auto residual = [&](const std::pair<int, double>& entry) {
        const auto it = q_of.find(entry.first);
        return std::max(0.0, entry.second - (it == q_of.end() ? 0.0 : it->second));
    };
    double total = 0.0;
    for (const auto& entry : dist_) total += residual(entry);
    if (!(total > 0.0)) return draft;   // p <= q everywhere: p == q, and then d was accepted surely
    const double target = std::generate_canonical<double, 53>(rng_) * total;
    double cumulative = 0.0;
    int last = draft;
    for (const auto& entry : dist_) {
        const double r = residual(entry);
        if (r <= 0.0) continue;
        cumulative += r;
        last = entry.first;
        if (target < cumulative) return entry.first;
    }
    return last;   // rounding left the target at the very end
}

// Plain greedy decoding (no penalties in effect, no logprobs) needs no copy of the row: one pass
// finds the raw maximum and its first index, then the few biased tokens are compared with it.
// Same token as the general path (ties -> lowest id). Returns false, leaving the row to the
// general path (and its errors), for anything unusual: NaN or infinite values, a biased token
// at the raw maximum, a bias that makes a value non-finite.
bool Sampler::greedy_without_copy(const float* logits, int* token) const {
    const SamplingParams& p = params_;
    if (p.temperature > 0.0f || p.n_logprobs >= 0 || penalties_active() || p.logit_bias.size() > 64) return false;
    const size_t n = work_.size();
    bool has_nan = false;
    const float m = max_value(logits, n, &has_nan);
    if (has_nan || !std::isfinite(m)) return false;
    size_t best = 0;
    while (logits[best] != m) ++best;
    float best_value = m;
    for (const auto& [tok, bias] : p.logit_bias) {
        if ((size_t)tok == best) return false;
        float v = logits[tok];
        for (const auto& [t2, b2] : p.logit_bias)   // every entry for this token, in order
            if (t2 == tok) v += b2;
        if (std::isnan(v) || v == kInf) return false;
        if (v > best_value || (v == best_value && (size_t)tok < best)) best = (size_t)tok, best_value = v;
    }
    *token = static_cast<int>(best);
    return true;
}

// row_ = logits (masked) + logit_bias; rejects NaN / +inf and rows where every token is at -inf.
// The copy into work_ is made only when a mask, a bias or a penalty will change the row:
// copying 262,144 logits was a fifth of a default (top-k 40) draw.
void Sampler::load_biased_logits(const float* logits, const uint32_t* allowed) {
    if (allowed == nullptr && params_.logit_bias.empty() && !penalties_active()) {
        row_ = logits;
    } else {
        if (allowed != nullptr)
            copy_allowed(logits, allowed, work_.data(), work_.size());
        else
            std::memcpy(work_.data(), logits, work_.size() * sizeof(float));
        for (const auto& [token, bias] : params_.logit_bias) work_[static_cast<size_t>(token)] += bias;
        row_ = work_.data();
    }
    bool has_nan = false;
    work_max_ = max_value(row_, work_.size(), &has_nan);
    if (has_nan) throw std::runtime_error("Sampler.sample: logits contain NaN");
    if (work_max_ == kInf) throw std::runtime_error("Sampler.sample: logits contain +inf");
    if (work_max_ == -kInf && allowed != nullptr)
        throw std::runtime_error("Sampler.sample: the grammar allows no token here (or every allowed one is banned)");
    if (work_max_ == -kInf)
        throw std::runtime_error("Sampler.sample: every token has logit -inf (all banned by logit_bias?)");
}

// log-sum-exp of the biased logits, and the n_logprobs best tokens with their logprobs.
void Sampler::compute_logprob_stats() {
    const double total = sum_exp<false>(row_, work_.size(), work_max_, 1.0f, nullptr, nullptr);
    logsumexp_ = work_max_ + static_cast<float>(std::log(total));
    last_top_.clear();
    if (params_.n_logprobs == 0) return;
    select_top_k(row_, work_.size(), static_cast<size_t>(params_.n_logprobs), candidates_);
    for (const Candidate& c : candidates_) last_top_.push_back({c.token, c.logit - logsumexp_});
}

// Whether a penalty changes some logit of the next row (some history and a non-neutral setting).
bool Sampler::penalties_active() const {
    const SamplingParams& p = params_;
    return p.penalty_last_n != 0 && !token_counts_.empty() &&
           (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
}

// Repeat penalty (divide positive / multiply non-positive logits), then frequency and presence
// penalties (OpenAI's definition), for every token in the history window.
void Sampler::apply_penalties() {
    pre_penalty_.clear();
    const SamplingParams& p = params_;
    if (!penalties_active()) return;
    for (const auto& [token, count] : token_counts_) {
        float& logit = work_[static_cast<size_t>(token)];
        pre_penalty_.push_back({token, logit});
        logit = logit <= 0.0f ? logit * p.repeat_penalty : logit / p.repeat_penalty;
        logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    }
    work_max_ = max_value(row_, work_.size(), nullptr);
    if (work_max_ == -kInf)
        throw std::runtime_error("Sampler.sample: every token has logit -inf after penalties");
}

// First index of the maximum (ties -> lowest id).
int Sampler::sample_greedy() const {
    size_t i = 0;
    while (row_[i] != work_max_) ++i;
    return static_cast<int>(i);
}

// Fills candidates_ with the tokens that survive top-k / top-p / min-p; leaves it empty when
// no truncation is active (the draw then runs over the whole row).
void Sampler::select_candidates() {
    const SamplingParams& p = params_;
    const size_t n = work_.size();
    const bool use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < n;
    candidates_.clear();
    if (use_top_k) {
        select_top_k(row_, n, static_cast<size_t>(p.top_k), candidates_);
        if (p.top_p < 1.0f || p.min_p > 0.0f) {
            double total = 0.0;  // top-p renormalizes over the top-k survivors, as llama.cpp
            for (const Candidate& c : candidates_) total += exp_fast(c.logit - work_max_);
            truncate_sorted_candidates(total, work_max_);
        }
        return;
    }
    if (p.min_p > 0.0f) {
        // min-p first: its survivors (usually few) are found by a cheap threshold scan, and
        // top-p followed by min-p keeps a prefix of them (both keep prefixes of the sorted row).
        const float min_logit = work_max_ + std::log(p.min_p);  // p_i >= min_p * p_max
        for_each_at_least(row_, n, min_logit,
                          [&](size_t i) { candidates_.push_back({row_[i], static_cast<int>(i)}); });
        if (p.top_p >= 1.0f) return;
        if (candidates_.size() <= kSortableCandidates) {
            std::sort(candidates_.begin(), candidates_.end(), ranks_before);
            const double total = sum_exp<false>(row_, n, work_max_, 1.0f, nullptr, nullptr);
            truncate_sorted_candidates(total, work_max_);
            return;
        }
        candidates_.clear();  // a flat row: too many to sort, use the histogram
    }
    if (p.top_p < 1.0f) select_nucleus_full_vocab();
}

// Top-p (then min-p) over the whole row without sorting it. The weights w = exp(x - max) go
// into a histogram keyed by their float bits >> 20 (8 buckets per power of two; float bits
// are monotone in w >= 0). Walking buckets from the top finds the one where the cumulative mass
// reaches top_p * total: tokens above it are all in the nucleus, and only that boundary bucket
// is sorted to find the exact cut (as a full descending sort would).
void Sampler::select_nucleus_full_vocab() {
    constexpr int kShift = 20;
    constexpr size_t kBuckets = (0x3F800000 >> kShift) + 1;  // keys of w in [0, 1]
    const size_t n = work_.size();
    weights_.resize(n);
    block_sums_.resize((n + kSumBlock - 1) / kSumBlock);
    const double total = sum_exp<true>(row_, n, work_max_, 1.0f, weights_.data(), block_sums_.data());
    auto key_of = [](float w) {
        int32_t bits;
        std::memcpy(&bits, &w, sizeof(bits));
        return bits >> kShift;
    };
    // Tokens below w_floor hold at most n * w_floor = (1 - top_p) * total of the mass, so the
    // nucleus lies above it and only those tokens enter the histogram.
    const float w_floor = static_cast<float>((1.0 - static_cast<double>(params_.top_p)) * total / static_cast<double>(n));
    // kCopies interleaved histograms (token t adds to copy t % kCopies): consecutive hits in
    // one bucket then form independent add chains instead of one serial chain.
    constexpr size_t kCopies = 4;
    bucket_mass_.assign(kCopies * kBuckets, 0.0f);
    for_each_at_least(weights_.data(), n, w_floor, [&](size_t t) {
        bucket_mass_[(t % kCopies) * kBuckets + static_cast<size_t>(key_of(weights_[t]))] += weights_[t];
    });

    const double target = static_cast<double>(params_.top_p) * total;
    double above = 0.0;  // mass of the buckets above the boundary
    int boundary = static_cast<int>(kBuckets) - 1;
    for (; boundary > 0; --boundary) {
        double mass = 0.0;
        for (size_t c = 0; c < kCopies; ++c) mass += bucket_mass_[c * kBuckets + static_cast<size_t>(boundary)];
        if (above + mass >= target) break;
        above += mass;
    }
    const int32_t boundary_bits = boundary << kShift;
    float boundary_low;  // smallest weight with key >= boundary
    std::memcpy(&boundary_low, &boundary_bits, sizeof(boundary_low));

    const float min_logit = params_.min_p > 0.0f ? work_max_ + std::log(params_.min_p) : -kInf;
    boundary_.clear();
    for_each_at_least(weights_.data(), n, boundary_low, [&](size_t t) {
        const Candidate c{row_[t], static_cast<int>(t)};
        if (key_of(weights_[t]) > boundary) {
            if (c.logit >= min_logit) candidates_.push_back(c);
        } else {
            boundary_.push_back(c);
        }
    });
    std::sort(boundary_.begin(), boundary_.end(), ranks_before);
    double cumulative = above;
    for (const Candidate& c : boundary_) {
        if (c.logit >= min_logit || candidates_.empty()) candidates_.push_back(c);
        cumulative += weights_[static_cast<size_t>(c.token)];
        if (cumulative >= target) break;
    }
}

// Cuts the sorted candidates_ to the top-p nucleus (smallest prefix whose mass reaches
// top_p * total_weight, weights exp(logit - max_logit)) and then to the min-p set.
void Sampler::truncate_sorted_candidates(double total_weight, float max_logit) {
    const SamplingParams& p = params_;
    size_t keep = candidates_.size();
    if (p.top_p < 1.0f) {
        const double target = static_cast<double>(p.top_p) * total_weight;
        double cumulative = 0.0;
        for (size_t i = 0; i < candidates_.size(); ++i) {
            cumulative += exp_fast(candidates_[i].logit - max_logit);
            if (cumulative >= target) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p.min_p > 0.0f) {
        const float min_logit = max_logit + std::log(p.min_p);  // p_i >= min_p * p_max
        size_t i = 1;                                           // the best token always stays
        while (i < keep && candidates_[i].logit >= min_logit) ++i;
        keep = i;
    }
    candidates_.resize(keep);
}

// Categorical draw over candidates_ with weights exp((logit - max) / temperature).
int Sampler::draw_from_candidates() {
    const float inv_temp = 1.0f / params_.temperature;
    const Candidate* best = &candidates_.front();
    for (const Candidate& c : candidates_)
        if (ranks_before(c, *best)) best = &c;
    double total = 0.0;
    for (const Candidate& c : candidates_) total += exp_fast((c.logit - best->logit) * inv_temp);
    const double target = std::generate_canonical<double, 53>(rng_) * total;
    double cumulative = 0.0;
    for (const Candidate& c : candidates_) {
        const float w = exp_fast((c.logit - best->logit) * inv_temp);
        cumulative += w;
        if (target < cumulative && w > 0.0f) return c.token;
    }
    return best->token;  // rounding left the target at the very end (weight ~0 there)
}

// Categorical draw over the whole row (no truncation active).
int Sampler::draw_from_full_vocab() {
    const size_t n = work_.size();
    const float inv_temp = 1.0f / params_.temperature;
    weights_.resize(n);
    block_sums_.resize((n + kSumBlock - 1) / kSumBlock);
    const double total = sum_exp<true>(row_, n, work_max_, inv_temp, weights_.data(), block_sums_.data());
    const double target = std::generate_canonical<double, 53>(rng_) * total;
    // Skip whole blocks first, then walk inside the block that holds the target.
    double cumulative = 0.0;
    size_t start = 0;
    for (; start < n; start += kSumBlock) {
        const float block_sum = block_sums_[start / kSumBlock];
        if (target < cumulative + block_sum || start + kSumBlock >= n) break;
        cumulative += block_sum;
    }
    for (size_t i = start; i < n; ++i) {
        cumulative += weights_[i];
        if (target < cumulative && weights_[i] > 0.0f) return static_cast<int>(i);
    }
    // Rounding left the target at the very end: take the last token with positive weight
    // (one exists: the max has weight 1).
    size_t i = n - 1;
    while (weights_[i] <= 0.0f) --i;
    return static_cast<int>(i);
}

void sample_rows(ThreadPool& pool, Sampler* const* samplers, const float* logits, int64_t n_vocab,
                 const int64_t* rows, int n, bool accept, int* tokens, std::string* errors,
                 const uint32_t* masks, const int64_t* mask_rows) {
    const int64_t words = mask_words(n_vocab);
    pool.run([&](int ith, int nth) {
        for (int i = ith; i < n; i += nth) {
            try {
                const uint32_t* allowed =
                    masks != nullptr && mask_rows[i] >= 0 ? masks + mask_rows[i] * words : nullptr;
                tokens[i] = samplers[i]->sample(logits + rows[i] * n_vocab, allowed);
                if (accept) samplers[i]->accept(tokens[i]);
            } catch (const std::exception& e) {
                tokens[i] = -1;
                errors[i] = e.what();
            }
        }
    });
}

}  // namespace lll
