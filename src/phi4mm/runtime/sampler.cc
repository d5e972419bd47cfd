// Sampler implementation: option validation, the bias and penalty steps, greedy and sampled
// selection, and the log-probability bookkeeping (log-sum-exp in double, top-N by partial sort).
#include "phi4mm/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace phi4mm {

Status SamplingOptions::Validate(int64_t vocab_size) const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return InvalidArgument("temperature must be >= 0 (0 = greedy), got " + std::to_string(temperature));
  if (top_k < 0) return InvalidArgument("top-k must be >= 0 (0 = off), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top-p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p < 1.0f)) return InvalidArgument("min-p must be in [0, 1), got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return InvalidArgument("repetition penalty must be > 0 (1 = off), got " + std::to_string(repetition_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return InvalidArgument("frequency_penalty must be in [-2, 2] (0 = off), got " + std::to_string(frequency_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return InvalidArgument("presence_penalty must be in [-2, 2] (0 = off), got " + std::to_string(presence_penalty));
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    return InvalidArgument("top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " +
                           std::to_string(top_logprobs));
  std::vector<int32_t> ids;
  ids.reserve(logit_bias.size());
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      const std::string range = vocab_size > 0 ? "0.." + std::to_string(vocab_size - 1) : "non-negative";
      return InvalidArgument("logit_bias names token id " + std::to_string(id) +
                             ", which is outside the vocabulary (ids " + range + ")");
    }
    if (!(bias >= -100.0f && bias <= 100.0f))
      return InvalidArgument("logit_bias for token id " + std::to_string(id) + " must be in [-100, 100], got " +
                             std::to_string(bias));
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
    return InvalidArgument("logit_bias lists token id " + std::to_string(*dup) + " more than once");
  return Status::Ok();
}

int32_t ArgMax(std::span<const float> logits) {
  // First maximum, like torch.argmax.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double LogSumExp(std::span<const float> logits) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  if (!std::isfinite(mx)) return mx;
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

std::vector<double> LogSoftmax(std::span<const float> logits) {
  const double lse = LogSumExp(logits);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
  return out;
}

Sampler::Sampler(const SamplingOptions& opts, int64_t sample_vocab)
    : opts_(opts), sample_vocab_(sample_vocab), rng_(opts.seed) {}

void Sampler::SetPromptLength(size_t n) {
  prompt_length_ = n;
  prompt_length_set_ = true;
}

void Sampler::ApplyBiasAndPenalties(std::span<float> logits, std::span<const int32_t> history) const {
  auto in_row = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < logits.size(); };
  for (const auto& [id, bias] : opts_.logit_bias)
    if (in_row(id)) logits[id] += bias;
  if (opts_.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (!in_row(id)) continue;
      float& l = logits[id];
      l = l < 0 ? l * opts_.repetition_penalty : l / opts_.repetition_penalty;
    }
  }
  if (opts_.frequency_penalty != 0.0f || opts_.presence_penalty != 0.0f) {
    const size_t from = std::min(prompt_length_, history.size());
    std::vector<int32_t> generated(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
    std::sort(generated.begin(), generated.end());
    for (size_t i = 0; i < generated.size();) {
      size_t j = i;
      while (j < generated.size() && generated[j] == generated[i]) ++j;
      if (in_row(generated[i])) {
        float& l = logits[generated[i]];
        l -= static_cast<float>(j - i) * opts_.frequency_penalty;
        l -= opts_.presence_penalty;
      }
      i = j;
    }
  }
}

void Sampler::RecordTop(std::span<const float> logits, double log_sum_exp) {
  last_.top.clear();
  const size_t k = std::min(static_cast<size_t>(opts_.top_logprobs), logits.size());
  if (k == 0) return;
  idx_.resize(logits.size());
  std::iota(idx_.begin(), idx_.end(), 0);
  std::partial_sort(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(k), idx_.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < k; ++i)
    last_.top.emplace_back(idx_[i], static_cast<float>(static_cast<double>(logits[idx_[i]]) - log_sum_exp));
}

int32_t Sampler::Next(std::span<float> logits, std::span<const int32_t> history) {
  if (!prompt_length_set_) SetPromptLength(history.size());
  ApplyBiasAndPenalties(logits, history);
  const bool record = records_logprobs() && !logits.empty();
  double lse = 0;
  if (record) {
    lse = LogSumExp(logits);
    RecordTop(logits, lse);
  }
  if (opts_.temperature == 0.0f) {
    const int32_t id = ArgMax(logits);
    if (record) {
      last_.id = id;
      last_.logprob = static_cast<float>(static_cast<double>(logits[id]) - lse);
    }
    return id;
  }
  if (record) processed_.assign(logits.begin(), logits.end());
  const int32_t id = Sample(logits);
  if (record) {
    last_.id = id;
    last_.logprob = static_cast<float>(static_cast<double>(processed_[id]) - lse);
  }
  return id;
}

// The draw never sorts the whole vocabulary (a std::sort of 200,064 ids took ~18 ms per sampled
// token, a third of a decode step): top-k sorts its k candidates; top-p sorts a growing prefix of
// the candidates (256 ids, then 4x more) until it holds the mass asked for; min-p then keeps the
// ids whose logit is within log(min_p) of the maximum (p >= p_max * min_p); with none of them the
// draw walks the ids in id order. The kept set and its probabilities are those of a full sort
// (ties among equal logits broken by id); only the walk order, and with it which id a given seed
// draws, can differ from a sorted walk. Ids at -inf (masked by an output constraint or a bias)
// are no candidates: their weight is 0, so leaving them out changes no sum and no draw, and a
// constrained token pays exp() only for the ids its grammar allows. Each candidate's weight is
// computed once (about 1 ms of exp() per pass over 200k ids).
int32_t Sampler::Sample(std::span<float> logits) {
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(logits.size()), sample_vocab_);
  for (int64_t i = 0; i < n; ++i) logits[i] /= opts_.temperature;
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  // Candidates: the top-k ids sorted by logit, or every id above -inf in id order (every id when
  // all are at -inf).
  const bool top_k = opts_.top_k > 0 && opts_.top_k < n;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  idx_.clear();
  if (!top_k && mx > kMasked) {
    for (int64_t i = 0; i < n; ++i)
      if (logits[i] > kMasked) idx_.push_back(static_cast<int32_t>(i));
  } else {
    idx_.resize(static_cast<size_t>(n));
    std::iota(idx_.begin(), idx_.end(), 0);
  }
  if (top_k) {
    std::partial_sort(idx_.begin(), idx_.begin() + opts_.top_k, idx_.end(), by_logit);
    idx_.resize(static_cast<size_t>(opts_.top_k));
  }
  bool sorted = top_k;
  weight_.resize(static_cast<size_t>(n));
  auto weight = [&](int32_t id) { return weight_[id] = std::exp(static_cast<double>(logits[id] - mx)); };
  size_t keep = idx_.size();
  bool weighed = false;  // weight_ holds every candidate's weight
  if (opts_.top_p < 1.0f) {
    // The smallest prefix (by descending logit) whose mass reaches top_p of the candidates' (at
    // least one id): sort a prefix, and widen it only when it falls short.
    double total = 0;
    for (int32_t id : idx_) total += weight(id);
    weighed = true;
    const double want = static_cast<double>(opts_.top_p) * total;
    size_t m = std::min<size_t>(idx_.size(), 256);
    for (;;) {
      if (!top_k) {
        std::nth_element(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(m - 1), idx_.end(), by_logit);
        std::sort(idx_.begin(), idx_.begin() + static_cast<std::ptrdiff_t>(m), by_logit);
      }
      double cum = 0;
      size_t k = 0;
      while (k < m) {
        cum += weight_[idx_[k++]];
        if (cum >= want) break;
      }
      if (cum >= want || m == idx_.size()) {
        keep = k;
        break;
      }
      m = std::min(idx_.size(), 4 * m);
    }
    sorted = true;
  }
  if (opts_.min_p > 0.0f) {
    // min-p as a logit threshold (exp(l - mx) >= min_p); the maximum always passes.
    const float floor = mx + std::log(opts_.min_p);
    if (sorted) {
      size_t k = 1;
      while (k < keep && logits[idx_[k]] >= floor) ++k;
      keep = k;
    } else {
      keep = static_cast<size_t>(
          std::remove_if(idx_.begin(), idx_.end(), [&](int32_t id) { return logits[id] < floor; }) - idx_.begin());
    }
  }
  // The kept ids' sum, then the walk.
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += weighed ? weight_[idx_[i]] : weight(idx_[i]);
  std::uniform_real_distribution<double> u(0.0, kept_total);
  double r = u(rng_), acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += weight_[idx_[i]];
    if (r < acc) return idx_[i];
  }
  return idx_[keep - 1];
}

}  // namespace phi4mm
