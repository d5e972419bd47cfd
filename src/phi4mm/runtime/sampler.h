// Next-token selection from logits: greedy, or sampling with temperature, top-k, top-p, min-p, from
// a seeded generator so a request is reproducible; plus what an OpenAI-compatible server needs:
// logit bias, frequency and presence penalties, and the log-probabilities of the chosen token and
// of the most likely ones. The logits go through, in this order: (1) the logit bias, added to the
// listed ids; (2) the repetition penalty (transformers' semantics, over the prompt and the generated
// ids); (3) the frequency and presence penalties (OpenAI's semantics, over the generated ids only:
// logit[j] -= count[j] * frequency_penalty, then -= presence_penalty if count[j] > 0); then either
// the argmax (greedy) or (4) temperature, top-k, top-p and min-p, in the order of transformers'
// logits processors. Log-probabilities (phi4mm's choice for the OpenAI `logprobs` fields) are the
// log-softmax, computed in double with the maximum subtracted, of the whole logits row after steps
// 1-3 and before temperature and truncation: they reflect the bias and penalties the request asked
// for but not its temperature, top-k, top-p or min-p.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

inline constexpr int kMaxTopLogprobs = 20;

struct SamplingOptions {
  float temperature = 0.0f;        // 0 = greedy
  int top_k = 0;                   // 0 = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off
  float repetition_penalty = 1.0f; // 1 = off; HF semantics (divide positive, multiply negative)
  float frequency_penalty = 0.0f;  // 0 = off; OpenAI semantics, in [-2, 2], generated ids only
  float presence_penalty = 0.0f;   // 0 = off; OpenAI semantics, in [-2, 2], generated ids only
  // (token id, bias in [-100, 100]) added to the logits before anything else; each id at most once.
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool logprobs = false;           // record the chosen token's log-probability
  int top_logprobs = 0;            // 0..kMaxTopLogprobs most likely tokens recorded with it
  uint64_t seed = 0;
  // Checks every range. `vocab_size` > 0 also requires each logit_bias id to be below it (the
  // tokenizer's vocabulary); with 0 the ids are only checked to be non-negative.
  Status Validate(int64_t vocab_size = 0) const;
};

// What Next() records about the token it chose when log-probabilities are requested.
struct TokenLogprobs {
  int32_t id = -1;
  float logprob = 0.0f;
  // The top_logprobs most likely ids and their log-probabilities, most likely first (equal values
  // by increasing id); may include the chosen id.
  std::vector<std::pair<int32_t, float>> top;
};

class Sampler {
 public:
  // `sample_vocab`: ids >= this are never sampled (rows with no token string); greedy ignores it
  // to stay identical to the reference's argmax. `opts` should have passed Validate(); logit_bias
  // ids outside the logits row are skipped.
  Sampler(const SamplingOptions& opts, int64_t sample_vocab);
  // How many leading ids of every `history` passed to Next() are the prompt (they count for the
  // repetition penalty but not for the frequency and presence penalties). When it is never set,
  // the history seen by the first Next() call is taken as the prompt: a Sampler serves one request,
  // and its first call comes before any id is generated.
  void SetPromptLength(size_t n);
  // Picks the next id. `history` holds the prompt and the generated ids so far (for the penalties).
  // `logits` is modified in place.
  int32_t Next(std::span<float> logits, std::span<const int32_t> history);
  // True when Next() records log-probabilities (opts.logprobs or opts.top_logprobs > 0).
  bool records_logprobs() const { return opts_.logprobs || opts_.top_logprobs > 0; }
  // The chosen token of the last Next() call, when records_logprobs(); otherwise empty.
  const TokenLogprobs& last_logprobs() const { return last_; }

 private:
  void ApplyBiasAndPenalties(std::span<float> logits, std::span<const int32_t> history) const;
  void RecordTop(std::span<const float> logits, double log_sum_exp);
  // Temperature, top-k, top-p, min-p and the draw, over ids below sample_vocab_.
  int32_t Sample(std::span<float> logits);

  SamplingOptions opts_;
  int64_t sample_vocab_;
  std::mt19937_64 rng_;
  std::vector<int32_t> idx_;
  std::vector<double> weight_;  // a candidate's exp(logit - max) by id, during Sample
  bool prompt_length_set_ = false;
  size_t prompt_length_ = 0;
  std::vector<float> processed_;  // the logits after bias and penalties, kept while sampling
  TokenLogprobs last_;
};

int32_t ArgMax(std::span<const float> logits);

// log(sum(exp(logits))) in double, with the maximum subtracted first.
double LogSumExp(std::span<const float> logits);
// The log-softmax of `logits` in double (logits[i] - LogSumExp(logits)).
std::vector<double> LogSoftmax(std::span<const float> logits);

}  // namespace phi4mm
