// Next-token selection from logits: greedy, or sampling with temperature, top-k, top-p, min-p and
// a repetition penalty, from a seeded generator so a request is reproducible. Follows the order
// of transformers' logits processors: repetition penalty, temperature, top-k, top-p, min-p.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

struct SamplingOptions {
  float temperature = 0.0f;        // 0 = greedy
  int top_k = 0;                   // 0 = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off
  float repetition_penalty = 1.0f; // 1 = off; HF semantics (divide positive, multiply negative)
  uint64_t seed = 0;
  Status Validate() const;
};

class Sampler {
 public:
  // `sample_vocab`: ids >= this are never sampled (rows with no token string); greedy ignores it
  // to stay identical to the reference's argmax.
  Sampler(const SamplingOptions& opts, int64_t sample_vocab);
  // Picks the next id. `history` holds the prompt and the generated ids (for the penalty).
  // `logits` is modified in place.
  int32_t Next(std::span<float> logits, std::span<const int32_t> history);

 private:
  SamplingOptions opts_;
  int64_t sample_vocab_;
  std::mt19937_64 rng_;
  std::vector<int32_t> idx_;
};

int32_t ArgMax(std::span<const float> logits);

}  // namespace phi4mm
