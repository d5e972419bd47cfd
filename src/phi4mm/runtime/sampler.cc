// Sampler implementation.
#include "phi4mm/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace phi4mm {

Status SamplingOptions::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return InvalidArgument("temperature must be >= 0 (0 = greedy), got " + std::to_string(temperature));
  if (top_k < 0) return InvalidArgument("top-k must be >= 0 (0 = off), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top-p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p < 1.0f)) return InvalidArgument("min-p must be in [0, 1), got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return InvalidArgument("repetition penalty must be > 0 (1 = off), got " + std::to_string(repetition_penalty));
  return Status::Ok();
}

int32_t ArgMax(std::span<const float> logits) {
  // First maximum, like torch.argmax.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplingOptions& opts, int64_t sample_vocab)
    : opts_(opts), sample_vocab_(sample_vocab), rng_(opts.seed) {}

int32_t Sampler::Next(std::span<float> logits, std::span<const int32_t> history) {
  if (opts_.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
      float& l = logits[id];
      l = l < 0 ? l * opts_.repetition_penalty : l / opts_.repetition_penalty;
    }
  }
  if (opts_.temperature == 0.0f) return ArgMax(logits);

  const int64_t n = std::min<int64_t>(static_cast<int64_t>(logits.size()), sample_vocab_);
  for (int64_t i = 0; i < n; ++i) logits[i] /= opts_.temperature;
  idx_.resize(static_cast<size_t>(n));
  std::iota(idx_.begin(), idx_.end(), 0);
  int64_t keep = n;
  if (opts_.top_k > 0 && opts_.top_k < keep) {
    std::partial_sort(idx_.begin(), idx_.begin() + opts_.top_k, idx_.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    keep = opts_.top_k;
  } else {
    std::sort(idx_.begin(), idx_.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  }
  // Softmax over the kept candidates (sorted, descending).
  const float mx = logits[idx_[0]];
  std::vector<double> p(static_cast<size_t>(keep));
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += p[i] = std::exp(static_cast<double>(logits[idx_[i]] - mx));
  for (double& v : p) v /= sum;
  if (opts_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (always at least one).
    double cum = 0;
    int64_t k = 0;
    while (k < keep) {
      cum += p[k++];
      if (cum >= opts_.top_p) break;
    }
    keep = k;
  }
  if (opts_.min_p > 0.0f) {
    const double thr = p[0] * opts_.min_p;
    int64_t k = 1;
    while (k < keep && p[k] >= thr) ++k;
    keep = k;
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += p[i];
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (r < acc) return idx_[i];
  }
  return idx_[keep - 1];
}

}  // namespace phi4mm
