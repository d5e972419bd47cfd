// Function calling in Phi-4's own format. Requests: OpenAI `tools[].function` become the JSON list
// of {"name","description","parameters"} the system turn carries between <|tool|> and <|/tool|>,
// and assistant `tool_calls` in the history become <|tool_call|>[{"name","arguments"}]<|/tool_call|>.
// Answers: the text after the model's <|tool_call|> token is parsed leniently, as the Berkeley
// Function-Calling Leaderboard's Phi handler does (missing close tag, a bare object instead of a
// list, several objects one after another, `parameters` as an alias of `arguments`); items
// without a name are dropped.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace phi4mm::server {

inline constexpr int32_t kToolCallTokenId = 200025;       // <|tool_call|>
inline constexpr int32_t kToolCallCloseTokenId = 200026;  // <|/tool_call|>
inline constexpr std::string_view kToolCallOpen = "<|tool_call|>";
inline constexpr std::string_view kToolCallClose = "<|/tool_call|>";

struct ToolCall {
  std::string id;         // "call_<24 alphanumerics>"
  std::string name;
  std::string arguments;  // JSON text
};

// JSON text as Python's json.dumps writes it (", " and ": " separators), the style of the
// Phi-4 model card's tool examples.
std::string PythonStyleJson(const nlohmann::json& v);

// The <|tool|> block's JSON list from validated OpenAI tool definitions.
std::string RenderToolList(const nlohmann::ordered_json& tools);
// An assistant turn's calls (OpenAI tool_calls) as the model writes them.
std::string RenderToolCalls(const nlohmann::ordered_json& tool_calls);

// Parses the model's text after <|tool_call|> (the close tag and anything after it may be
// missing). Empty when nothing in it is a call.
std::vector<ToolCall> ParseToolCalls(std::string_view text);

// "<prefix><n alphanumerics>" from a process-wide random generator.
std::string RandomId(std::string_view prefix, size_t n);

}  // namespace phi4mm::server
