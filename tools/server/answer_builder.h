// Splits a generated answer into what the client sees: content text, and — when the request had
// tools and the model emits its <|tool_call|> token — the calls that follow it. Content is handed
// out as it becomes final (for streaming); once the tool-call token appears, the rest is buffered
// and parsed when the answer ends. An unparseable call is returned as plain content. When the
// tool-call grammar constrains the calls, they are scanned as they come instead (ToolCallStream),
// so a streamed answer can send them in OpenAI's delta shape.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tool_call_stream.h"
#include "tool_calls.h"

namespace phi4mm::server {

class AnswerBuilder {
 public:
  // `constrained`: the calls follow the tool-call grammar (scanned as they come).
  explicit AnswerBuilder(bool tools, bool constrained = false) : tools_(tools), constrained_(constrained) {}
  // One engine event's final text and its token (-1 for the closing flush). Returns the content
  // text that may be sent now.
  std::string Push(std::string_view text, int32_t token);
  // Ends the answer: returns the content not yet sent (the raw call text when it did not parse)
  // and fills calls().
  std::string Finish();
  const std::vector<ToolCall>& calls() const { return calls_; }
  // Constrained calls: the deltas that became known since the last call.
  std::vector<ToolCallDelta> TakeCallDeltas();
  // All content (sent or not), after Finish.
  const std::string& content() const { return content_; }

 private:
  bool tools_, constrained_;
  ToolCallStream stream_;
  std::vector<ToolCallDelta> deltas_;
  bool in_call_ = false;
  std::string content_;   // content text so far
  size_t sent_ = 0;       // how much of content_ has been handed out
  std::string call_text_; // text after <|tool_call|>
  std::vector<ToolCall> calls_;
};

}  // namespace phi4mm::server
