// AnswerStream: stop-string search and hold-back over the streaming detokenizer.
#include "phi4mm/runtime/answer_stream.h"

#include <algorithm>

namespace phi4mm {

namespace {
// Length of the longest suffix of `text` that is a proper prefix of some stop string: text that
// must be held back because a stop string may be completing.
size_t HeldBack(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(text.size(), s.size() - 1); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}
}  // namespace

AnswerStream::AnswerStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer, /*skip_special=*/true), stops_(std::move(stop_strings)) {}

bool AnswerStream::Push(int32_t id) {
  text_ += decoder_.Push(id);
  bool stop = false;
  for (const std::string& s : stops_) {
    const size_t from = taken_ > s.size() ? taken_ - s.size() : 0;
    const size_t pos = text_.find(s, from);
    if (pos != std::string::npos) {
      text_.resize(pos);
      stop = true;
    }
  }
  return stop;
}

std::string_view AnswerStream::TakeReady() {
  const size_t end = text_.size() - HeldBack(text_, stops_);
  if (end <= taken_) return {};
  const std::string_view out = std::string_view(text_).substr(taken_, end - taken_);
  taken_ = end;
  return out;
}

std::string_view AnswerStream::Finish(bool ended_on_stop_string) {
  if (!ended_on_stop_string) text_ += decoder_.Flush();
  const std::string_view out = std::string_view(text_).substr(std::min(taken_, text_.size()));
  taken_ = text_.size();
  return out;
}

}  // namespace phi4mm
