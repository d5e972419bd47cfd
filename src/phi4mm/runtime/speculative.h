// Draft-free speculative decoding's parts that need no model: the prompt-lookup proposer (the
// tokens that followed the latest earlier occurrence of the sequence's last n tokens, as
// llama.cpp's lookup decoding and vLLM's `ngram` do) and the tuner that picks each step's draft
// length from the measured cost of a verify step and the running acceptance rate. A driver
// (Session::Generate) verifies a draft as one multi-row decoder step and takes its rows' logits in
// order through Sequence::Next while each sampled id equals the drafted one; since every row's
// logits are those a one-row step would give, bit for bit (tests/batch_invariance_test.cc), and
// each token is sampled exactly as without a draft (the same sampler, the same random stream), the
// answer is the answer without speculation, greedy or seeded.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace phi4mm {

enum class SpeculativeMode { kNone, kNgram };
const char* SpeculativeModeName(SpeculativeMode m);
// Accepts "none" and "ngram".
std::optional<SpeculativeMode> ParseSpeculativeMode(std::string_view s);

struct SpeculativeOptions {
  SpeculativeMode mode = SpeculativeMode::kNone;
  int max_draft = 8;  // drafted tokens per verify step, at most (kMaxDraft)
  int min_ngram = 1;  // the lookup matches the last n tokens, n from max_ngram down to min_ngram
  int max_ngram = 3;
};
inline constexpr int kMaxDraft = 16;

// Up to `max_draft` ids that followed the latest earlier occurrence of the last n ids of
// `tokens`, for the largest n in [min_ngram, max_ngram] that has one; empty when none does.
std::vector<int32_t> LookupDraft(std::span<const int32_t> tokens, int max_draft, int min_ngram, int max_ngram);

// Chooses how many drafted ids a step verifies. Each drafted id is taken as accepted with the
// running rate a (successes / trials, halved in weight every 32 trials), so k drafts commit
// E(k) = 1 + a + ... + a^k tokens; a step of n rows costs c(n) = T(n) / T(1), the running means of
// the measured step times. The tuner returns the k in [1, cap] with the largest E(k) / c(k + 1),
// or 0 (a plain one-row step) when no k gains 5 % over it. Row counts not yet measured are
// assumed to cost what a one-row step costs, so each is tried once; while speculation is off, every
// 16th step still drafts (cap 2) to follow the acceptance rate.
class DraftTuner {
 public:
  explicit DraftTuner(int max_draft);
  int DraftLength(int cap);
  // A step of `rows` rows (1: plain decode; 1 + drafted: a verify step) took `seconds`.
  void RecordStep(int rows, double seconds);
  // A verify step drafted `drafted` ids, of which the first `accepted` were accepted.
  void RecordDraft(int drafted, int accepted);
  double acceptance() const { return successes_ / std::max(1e-9, trials_); }

 private:
  int max_draft_;
  double successes_ = 1.0, trials_ = 2.0;  // a prior of one in two
  std::array<double, kMaxDraft + 2> step_seconds_{};  // running mean per row count (0: not measured)
  int plain_since_probe_ = 0;
};

}  // namespace phi4mm
