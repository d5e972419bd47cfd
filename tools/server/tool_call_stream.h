// Tool calls as they are generated: the text after <|tool_call|> (a JSON list of {"name",
// "arguments"}, which the tool-call grammar guarantees) is scanned a character at a time, so each
// call can be streamed in OpenAI's delta shape: first its index, id and name, then its arguments
// in fragments, whose concatenation is exactly the arguments text of the finished call (the same
// text a non-streamed answer carries). Anything after the list's closing bracket is ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tool_calls.h"

namespace phi4mm::server {

struct ToolCallDelta {
  size_t index = 0;
  bool header = false;    // carries id and name (the call's first delta)
  std::string id, name;   // on the header
  std::string arguments;  // a fragment of the arguments text (may be empty on a header)
};

class ToolCallStream {
 public:
  // Scans more text of the list; returns what became known, in order (fragments of one call merged).
  std::vector<ToolCallDelta> Push(std::string_view text);
  // The calls seen so far (a call appears once its name is complete; ids "call_<24 alphanumerics>").
  const std::vector<ToolCall>& calls() const { return calls_; }
  // The list's closing bracket was seen.
  bool complete() const { return done_; }

 private:
  void Arg(char c, std::vector<ToolCallDelta>* out);
  void EndKeyOrName();

  std::vector<ToolCall> calls_;
  bool started_ = false, done_ = false;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  enum class Slot { kNone, kKey, kName, kArgs, kOther } slot_ = Slot::kNone;
  std::string key_, raw_;  // the key being read; the name's raw string
  bool expect_value_ = false;
  bool named_ = false;        // the object's name is known (its header went out)
  std::string pending_args_;  // arguments seen before the name
};

}  // namespace phi4mm::server
