// Draft-free speculative decoding's parts that need no model: the prompt-lookup proposer (the
// tokens that followed the latest earlier occurrence of the sequence's last n tokens, as
// llama.cpp's lookup decoding and vLLM's `ngram` do) and the tuner that picks each step's draft
// length from the measured cost of a verify step and the running acceptance rate. An answer's
// Sequence proposes the draft (Sequence::Propose), its driver (Session::Generate or the engine)
// verifies it as one multi-row decoder step, and Sequence::Take takes the rows' logits in order
// while each sampled id equals the drafted one; since every row's
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
  // The answer the caller expects, as token ids (OpenAI's `prediction`): drafts come from it
  // first, whatever `mode` says.
  std::vector<int32_t> prediction;
  bool on() const { return mode != SpeculativeMode::kNone || !prediction.empty(); }
};
inline constexpr int kMaxDraft = 16;

// Up to `max_draft` ids that followed the latest earlier occurrence of the last n ids of
// `tokens`, for the largest n in [min_ngram, max_ngram] that has one; empty when none does.
std::vector<int32_t> LookupDraft(std::span<const int32_t> tokens, int max_draft, int min_ngram, int max_ngram);
// The same search for the tail of `tokens` in `source` (any occurrence, the latest first).
std::vector<int32_t> LookupDraftIn(std::span<const int32_t> source, std::span<const int32_t> tokens, int max_draft,
                                   int min_ngram, int max_ngram);

// The draft for the next step of an answer that starts at `answer_begin` of `tokens`: from the
// prediction (its start while the answer is empty, else what follows the answer's tail in it),
// else, with mode ngram, from the prompt and answer (LookupDraft).
std::vector<int32_t> Draft(const SpeculativeOptions& o, std::span<const int32_t> tokens, size_t answer_begin,
                           int max_draft);

// A draft source shared by the requests of one engine (a server): for the last 3 and 2 ids of
// earlier requests' prompts and answers, the ids that followed them, in a table of a fixed size
// (`bytes`, allocated at the first Add). Each n-gram maps to one slot by its hash, and a later
// n-gram with the same slot replaces it: the memory never grows, the newest text wins. N-grams
// that hold an image or audio placeholder id are left out, and a continuation stops before one.
// A wrong draft costs only its rows (verification keeps the answer exact); text from one request
// can speed up another's, which shows in timing: a server whose users must not learn about each
// other's text turns it off. Not thread-safe: the engine's thread owns it.
class NgramPool {
 public:
  explicit NgramPool(int64_t bytes);
  bool on() const { return capacity_ > 0; }
  // Learns every 3- and 2-gram of `tokens` with the ids that follow it.
  void Add(std::span<const int32_t> tokens);
  // Up to `max_draft` ids that followed the last 3 (else 2) ids of `tokens` in what was learnt.
  std::vector<int32_t> Lookup(std::span<const int32_t> tokens, int max_draft) const;
  int64_t bytes() const;

 private:
  struct Slot {
    uint64_t key = 0;  // 0: empty
    uint8_t len = 0;
    std::array<int32_t, kMaxDraft> next{};
  };
  static uint64_t Key(std::span<const int32_t> gram);
  size_t capacity_;
  std::vector<Slot> slots_;
};

// The time of a decoder step by its row count, for steps of up to kMaxRows rows: the least of the
// last kWindow steps of that many rows or of more (a step of more rows does at least the same
// work), so that one slow step (a preempted thread, a first step that grows its buffers) does not
// make a row count look dear until it is measured again. 0 for a row count not yet measured.
class StepCosts {
 public:
  static constexpr int kMaxRows = 64;
  static constexpr int kWindow = 8;
  void Record(int64_t rows, double seconds);
  double Seconds(int64_t rows) const { return rows >= 1 && rows <= kMaxRows ? least_[static_cast<size_t>(rows)] : 0; }

 private:
  struct Recent {
    std::array<double, kWindow> seconds{};
    int count = 0, next = 0;
  };
  std::array<Recent, kMaxRows + 1> recent_{};
  std::array<double, kMaxRows + 1> least_{};  // Seconds(rows), kept by Record
};

// Chooses how many drafted ids a step verifies. Each drafted id is taken as accepted with the
// running rate a (successes / trials, halved in weight every 32 trials), so k drafts commit
// E(k) = 1 + a + ... + a^k tokens; adding k rows to a step of `base` rows (one of them this
// request's) costs c = T(base + k) / T(base), from StepCosts, so the step's tokens per unit of
// time change by (base - 1 + E(k)) / (base * c). The tuner returns the k in [1, cap] with the
// largest change, or 0 (no draft) when no k gains 10 %. The rate starts at one in three; a row
// count not yet measured is assumed to cost 1 + 0.1 per added row (so it gets tried, and measured,
// when drafts are accepted at all); steps past StepCosts::kMaxRows rows (already full of rows) get
// no drafts; while speculation does not pay, every 16th step still drafts (cap 2) to follow the
// acceptance rate, and so does every step until a first draft has been verified (a prediction
// that is the answer is then taken from the start, not from the first probe on).
class DraftTuner {
 public:
  explicit DraftTuner(int max_draft);
  int DraftLength(int cap, const StepCosts& costs, int64_t base = 1);
  // A verify step drafted `drafted` ids, of which the first `accepted` were accepted.
  void RecordDraft(int drafted, int accepted);
  double acceptance() const { return successes_ / std::max(1e-9, trials_); }

 private:
  int max_draft_;
  double successes_ = 1.0, trials_ = 3.0;  // a prior of one in three
  int plain_since_probe_ = 0;
  bool measured_ = false;  // a draft has been verified
};

}  // namespace phi4mm
