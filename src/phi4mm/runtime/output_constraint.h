// What shape an answer must take (OutputConstraint, part of GenerateOptions: immutable, shared by
// the requests that ask for the same thing) and the per-answer state that enforces it while tokens
// are sampled (ConstraintState, owned by the answer's Sequence). Two scopes:
//  * the whole answer follows the grammar, then ends with a stop id (JSON mode, JSON Schema);
//  * the grammar's text lies between an open and a close token (Phi-4's <|tool_call|> ...
//    <|/tool_call|>): the answer either must start with the open token and end right after the
//    close token (tool_choice required or a named tool), or is free text in which every open
//    token the model samples engages the grammar until its close token (tool_choice auto).
// Masking happens before the sampler's logit bias, penalties and truncation, so every sampler
// setting works on the allowed tokens only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/grammar/grammar.h"

namespace phi4mm {

struct OutputConstraint {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // null: the answer is free text
  bool between_tags = false;  // false: the whole answer
  int32_t open_id = -1, close_id = -1;
  bool must_open = false;     // between_tags: the answer is exactly open, grammar text, close
  bool active() const { return grammar != nullptr; }
};

class ConstraintState {
 public:
  // `stop_ids`: the ids that end the answer.
  ConstraintState(const OutputConstraint& c, std::span<const int32_t> stop_ids);
  ConstraintState(ConstraintState&&) = default;
  ConstraintState& operator=(ConstraintState&&) = default;
  // Sets the logits of the ids not allowed next to -infinity (nothing when the answer is free here).
  void Mask(std::span<float> logits);
  // Moves past the sampled id. Internal error when the constraint did not allow it (a masked row
  // always yields an allowed id, so this means a bug, not bad input).
  Status Accept(int32_t id);
  // How many leading ids of `ids` the constraint would accept one after another from here (all
  // of them when the answer is free text); this state does not move. Speculative decoding cuts a
  // draft there: a row past it could never be taken.
  size_t AllowedPrefix(std::span<const int32_t> ids) const;
  // The whole answer's grammar is complete without a stop id to end it (a request without valid
  // stop ids): nothing more may be sampled.
  bool finished() const { return phase_ == Phase::kGrammar && !c_.between_tags && matcher_->terminated(); }

 private:
  enum class Phase { kFree, kOpen, kGrammar, kStopOnly };
  ConstraintState(const ConstraintState& o);  // a trial copy (AllowedPrefix): its matcher forked
  void MaskAllBut(std::span<float> logits, std::span<const int32_t> keep);

  OutputConstraint c_;
  std::vector<int32_t> stop_ids_;
  Phase phase_ = Phase::kFree;
  std::optional<grammar::Matcher> matcher_;
  std::vector<float> keep_;  // scratch for MaskAllBut
};

}  // namespace phi4mm
