// sampling.h — token sampler following llama.cpp's default sampler chain.
//
// Chain (llama.cpp common/sampling.cpp defaults, without DRY / typical / XTC / mirostat):
//   logit bias -> penalties (repeat, frequency, presence over the last penalty_last_n accepted
//   tokens) -> top-k -> top-p -> min-p -> temperature -> categorical draw (std::mt19937).
// top-p and min-p act on probabilities at temperature 1 (temperature is applied after them, as
// in llama.cpp). temperature <= 0 selects the argmax after bias and penalties (ties -> lowest
// id); top-k / top-p / min-p never remove the argmax, so greedy ignores them.
//
// Logprobs (when n_logprobs >= 0) are the log-softmax of the logits after logit bias but before
// penalties / truncation / temperature, which is what OpenAI and llama-cpp-python report.
//
// Constrained decoding: sample / distribution / verify take an optional token bitmask
// `allowed` (bit t % 32 of word t / 32 set: token t may follow; ceil(n_vocab / 32) words, the
// layout llguidance writes). Masked-out tokens get logit -inf before logit bias, so every step
// of the chain (logprobs included) sees only the tokens the grammar allows.
#pragma once
#include <stdint.h>
#include <atomic>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/threadpool.h"

namespace lll {

struct SamplingParams {
    float temperature = 0.8f;       // <= 0: greedy
    int top_k = 40;                 // 0: disabled
    float top_p = 0.95f;            // (0, 1]; 1: disabled
    float min_p = 0.05f;            // [0, 1]; 0: disabled
    float repeat_penalty = 1.0f;    // > 0; 1: disabled
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int penalty_last_n = 64;        // 0: penalties off; -1: every token accepted since reset()
    std::vector<std::pair<int, float>> logit_bias;  // (token, added to its logit); -inf bans
    uint64_t seed = 0;
    int n_logprobs = 0;             // -1: no logprobs; 0: chosen token only; n: also the top n
};

// Throws std::invalid_argument naming the offending parameter.
void validate_sampling_params(const SamplingParams& params, int n_vocab);

struct TokenLogprob {
    int token;
    float logprob;
};

// One candidate token during truncation.
struct Candidate {
    float logit;
    int token;
};

// One sampler per sequence. Not for concurrent use: sample / accept / reset from two threads
// at once throw std::runtime_error instead of racing.
class Sampler {
public:
    Sampler(const SamplingParams& params, int n_vocab);
    Sampler(const Sampler&) = delete;
    Sampler& operator=(const Sampler&) = delete;

    // Records a token in the penalty history (call for every token that joins the sequence).
    void accept(int token);
    // Picks the next token from logits [n_vocab] among the `allowed` ones (nullptr: all).
    // Throws std::runtime_error when the logits hold NaN / +inf or every token is at -inf (or
    // masked out). Does not call accept().
    int sample(const float* logits, const uint32_t* allowed = nullptr);
    // Clears the penalty history and reseeds the generator with params().seed.
    void reset();

    // The distribution sample() draws from for this row (after bias, penalties, truncation and
    // temperature), as (token, probability) pairs; greedy: the argmax with probability 1.
    // Uses no randomness and does not change the sampler's state.
    std::vector<std::pair<int, double>> distribution(const float* logits, const uint32_t* allowed = nullptr);
    // Speculative decoding's rejection rule (Leviathan et al. 2023, Chen et al. 2023): the
    // drafted token d, proposed with probability q(d), is kept with probability min(1, p(d)/q(d)),
    // p being distribution(logits); otherwise a token is drawn from norm(max(0, p - q)). Either
    // way the result is distributed as p. q: (token, probability) pairs of the proposal; empty:
    // a point mass on d (a deterministic proposer). Returns (token, accepted). Logprobs as
    // sample(). Does not call accept().
    std::pair<int, bool> verify(const float* logits, int draft, const std::vector<std::pair<int, float>>& q,
                                const uint32_t* allowed = nullptr);

    bool has_logprobs() const { return has_logprobs_; }
    // Log-probability of the last sampled token, and the n_logprobs most likely tokens
    // (descending, ties -> lower id). Valid when has_logprobs().
    float last_logprob() const { return last_logprob_; }
    const std::vector<TokenLogprob>& last_top_logprobs() const { return last_top_; }

    const SamplingParams& params() const { return params_; }
    int n_vocab() const { return n_vocab_; }

private:
    class BusyGuard;  // marks the sampler in use for the duration of a call

    bool greedy_without_copy(const float* logits, int* token) const;
    void prepare_row(const float* logits, const uint32_t* allowed);
    void build_distribution(std::vector<std::pair<int, double>>& out);
    int draw_residual(const std::vector<std::pair<int, float>>& q, int draft);
    void finish_logprob(int token);
    void load_biased_logits(const float* logits, const uint32_t* allowed);
    void compute_logprob_stats();
    bool penalties_active() const;
    void apply_penalties();
    int sample_greedy() const;
    void select_candidates();
    void select_nucleus_full_vocab();
    void truncate_sorted_candidates(double total_weight, float max_logit);
    int draw_from_candidates();
    int draw_from_full_vocab();

    SamplingParams params_;
    int n_vocab_;
    std::atomic<bool> busy_{false};
    std::mt19937 rng_;

    // Penalty history: a ring of the last penalty_last_n accepted tokens and their counts.
    std::vector<int> history_;
    size_t history_start_ = 0;
    std::unordered_map<int, int> token_counts_;

    std::vector<float> work_;            // [n_vocab] logits after bias (then penalties), when any
    const float* row_ = nullptr;         // [n_vocab] the row the chain reads during a call: work_,
                                         // or the caller's logits when nothing changes them
    float work_max_ = 0.0f;              // max of row_
    std::vector<float> weights_;         // [n_vocab] scratch: exp((x - max) / T)
    std::vector<float> block_sums_;      // scratch: sums of weights_ per block
    std::vector<float> bucket_mass_;     // scratch: top-p histogram of weights
    std::vector<Candidate> candidates_;  // surviving tokens (empty: the whole row)
    std::vector<Candidate> boundary_;    // scratch: tokens of the top-p boundary bucket
    std::vector<std::pair<int, float>> pre_penalty_;  // (token, biased logit) of penalized tokens
    std::vector<std::pair<int, double>> dist_;        // scratch: verify()'s distribution

    bool has_logprobs_ = false;
    float logsumexp_ = 0.0f;
    float last_logprob_ = 0.0f;
    std::vector<TokenLogprob> last_top_;
};

// Number of 32-bit words of a token bitmask over n_vocab tokens.
inline int64_t mask_words(int64_t n_vocab) { return (n_vocab + 31) / 32; }

// One draw per row, on the pool's threads: tokens[i] = samplers[i]->sample(logits + rows[i] *
// n_vocab, mask of row i), then accept()ed when `accept`. masks: nullptr, or rows of
// mask_words(n_vocab) words, mask_rows[i] the row of sampler i's mask (-1: unconstrained). Rows are dealt to threads in turn; each sampler sits
// on one thread and reads only its own row, so a token does not depend on the split. A row whose
// sampler throws gets tokens[i] = -1 and the message in errors[i]; the other rows are drawn as if
// it were not there. The samplers must be distinct.
void sample_rows(ThreadPool& pool, Sampler* const* samplers, const float* logits, int64_t n_vocab,
                 const int64_t* rows, int n, bool accept, int* tokens, std::string* errors,
                 const uint32_t* masks = nullptr, const int64_t* mask_rows = nullptr);

}  // namespace lll
