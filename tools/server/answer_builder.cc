// Content / tool-call split of a streamed answer (answer_builder.h).
#include "answer_builder.h"

namespace phi4mm::server {

std::string AnswerBuilder::Push(std::string_view text, int32_t token) {
  if (in_call_) {
    call_text_ += text;
    if (constrained_) {
      std::vector<ToolCallDelta> d = stream_.Push(text);
      deltas_.insert(deltas_.end(), d.begin(), d.end());
    }
    return {};
  }
  content_ += text;
  if (tools_ && token == kToolCallTokenId) {
    in_call_ = true;
    // The token's own text is normally at the end of this event; when stop-string hold-back delayed
    // it, it arrives later and ParseToolCalls skips a leading marker.
    const size_t at = content_.rfind(kToolCallOpen);
    if (at != std::string::npos && at >= sent_) {
      call_text_ = content_.substr(at + kToolCallOpen.size());
      content_.resize(at);
      if (constrained_) deltas_ = stream_.Push(call_text_);
    }
  }
  std::string out = content_.substr(sent_);
  sent_ = content_.size();
  return out;
}

std::string AnswerBuilder::Finish() {
  if (in_call_ && constrained_ && !stream_.calls().empty()) {
    calls_ = stream_.calls();  // what the deltas carried, argument text for argument text
  } else if (in_call_) {
    calls_ = ParseToolCalls(call_text_);
    if (calls_.empty()) {
      content_ += std::string(kToolCallOpen) + call_text_;
    }
  }
  std::string out = content_.substr(sent_);
  sent_ = content_.size();
  return out;
}

std::vector<ToolCallDelta> AnswerBuilder::TakeCallDeltas() {
  std::vector<ToolCallDelta> out;
  out.swap(deltas_);
  return out;
}

}  // namespace phi4mm::server
