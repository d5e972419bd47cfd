// ConstraintState: the phases of a constrained answer (free text, the forced open token, the
// grammar, the stop ids after a forced close) over grammar::Matcher.
#include "phi4mm/runtime/output_constraint.h"

#include <algorithm>
#include <limits>
#include <string>

namespace phi4mm {

ConstraintState::ConstraintState(const OutputConstraint& c, std::span<const int32_t> stop_ids)
    : c_(c), stop_ids_(stop_ids.begin(), stop_ids.end()) {
  if (!c_.active()) return;
  if (!c_.between_tags) {
    phase_ = Phase::kGrammar;
    matcher_.emplace(c_.grammar, stop_ids_);
  } else if (c_.must_open) {
    phase_ = Phase::kOpen;
  }
}

ConstraintState::ConstraintState(const ConstraintState& o) : c_(o.c_), stop_ids_(o.stop_ids_), phase_(o.phase_) {
  if (o.matcher_) matcher_.emplace(o.matcher_->Fork());
}

size_t ConstraintState::AllowedPrefix(std::span<const int32_t> ids) const {
  if (!c_.active()) return ids.size();
  ConstraintState trial(*this);
  size_t k = 0;
  while (k < ids.size() && trial.Accept(ids[k]).ok()) ++k;
  return k;
}

void ConstraintState::MaskAllBut(std::span<float> logits, std::span<const int32_t> keep) {
  keep_.clear();
  for (int32_t id : keep) keep_.push_back(id >= 0 && static_cast<size_t>(id) < logits.size() ? logits[id] : 0.0f);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i] >= 0 && static_cast<size_t>(keep[i]) < logits.size()) logits[keep[i]] = keep_[i];
}

void ConstraintState::Mask(std::span<float> logits) {
  switch (phase_) {
    case Phase::kFree: return;
    case Phase::kOpen: return MaskAllBut(logits, std::span(&c_.open_id, 1));
    case Phase::kGrammar: return matcher_->MaskLogits(logits);
    case Phase::kStopOnly: return MaskAllBut(logits, stop_ids_);
  }
}

Status ConstraintState::Accept(int32_t id) {
  auto refused = [&] {
    if (matcher_ && !matcher_->error().empty())
      return Internal("the grammar engine failed: " + matcher_->error());
    return Internal("the output constraint did not allow the sampled token " + std::to_string(id));
  };
  switch (phase_) {
    case Phase::kFree:
      if (c_.active() && c_.between_tags && id == c_.open_id) {
        matcher_.emplace(c_.grammar, std::span(&c_.close_id, 1));
        phase_ = Phase::kGrammar;
      }
      return Status::Ok();
    case Phase::kOpen:
      if (id != c_.open_id) return refused();
      matcher_.emplace(c_.grammar, std::span(&c_.close_id, 1));
      phase_ = Phase::kGrammar;
      return Status::Ok();
    case Phase::kGrammar:
      if (!matcher_->Accept(id)) return refused();
      if (c_.between_tags && matcher_->terminated()) {
        matcher_.reset();
        phase_ = c_.must_open ? Phase::kStopOnly : Phase::kFree;
      }
      return Status::Ok();
    case Phase::kStopOnly:
      if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) return refused();
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace phi4mm
