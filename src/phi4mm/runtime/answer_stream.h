// The text side of one answer being generated: the streaming detokenizer, stop strings, and the
// hold-back of text that may still turn into a stop string, so that only final text is handed
// out. Shared by Session::Generate and the batched engine's requests, so both cut, hold back and
// flush the answer identically.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/tokenizer/tokenizer.h"

namespace phi4mm {

class AnswerStream {
 public:
  AnswerStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings);
  // Adds one generated token (not a stop id). Returns true when a stop string completed: the text
  // is then cut just before it and the answer is over.
  bool Push(int32_t id);
  // The text that became final since the last call (never part of a possible stop string).
  std::string_view TakeReady();
  // Ends the answer: unless it ended on a stop string, the detokenizer's pending bytes are
  // flushed. Returns the text not yet taken.
  std::string_view Finish(bool ended_on_stop_string);
  // All answer text so far, and how much of it has been taken.
  const std::string& text() const { return text_; }
  size_t taken() const { return taken_; }

 private:
  TokenStreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string text_;
  size_t taken_ = 0;
};

}  // namespace phi4mm
