// The JSON the server answers with: chat.completion and chat.completion.chunk objects, legacy
// text_completion objects, usage (with phi4mm's image/audio token details), log-probabilities,
// and the SSE framing of a stream ("data: <json>\n\n", ": ping" comments, "data: [DONE]").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/runtime/engine.h"
#include "tool_calls.h"

namespace phi4mm::server {

using Json = nlohmann::ordered_json;

struct ResponseMeta {
  std::string id;           // chatcmpl-... / cmpl-...
  int64_t created = 0;      // Unix seconds
  std::string model;        // the served name
  std::string fingerprint;  // system_fingerprint
};

// "stop", "length" or "tool_calls" (cancelled and expired answers are not reported as finished).
const char* FinishReasonString(FinishReason r, bool tool_calls);

Json UsageJson(const RequestResult& r, int64_t dynamic_hd);
// The usage of n choices of one prompt: the prompt (and its cached part) as the first choice's,
// the completion tokens of all.
Json UsageJson(std::span<const RequestResult> choices, int64_t dynamic_hd);
// {"content": [{"token","logprob","bytes","top_logprobs":[...]}]} for the given tokens.
Json LogprobsJson(const Tokenizer& tok, std::span<const TokenLogprobs> lps);
Json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index);

// One choice of a chat completion, and the completion of its choices (in index order).
Json ChatChoiceJson(size_t index, const std::string& content, const std::vector<ToolCall>& calls,
                    const char* finish_reason, const Json* logprobs);
Json ChatCompletionJson(const ResponseMeta& m, Json choices, const Json& usage);
// One chunk with choice `index` carrying `delta` (and `finish_reason`, or null when nullptr).
Json ChatChunkJson(const ResponseMeta& m, Json delta, const char* finish_reason, bool usage_null,
                   const Json* logprobs = nullptr, size_t index = 0);
// The usage chunk of stream_options.include_usage (choices: []).
Json UsageChunkJson(const ResponseMeta& m, const Json& usage, bool chat);

Json CompletionChoiceJson(size_t index, const std::string& text, const char* finish_reason);
Json CompletionJson(const ResponseMeta& m, Json choices, const Json& usage);
Json CompletionChunkJson(const ResponseMeta& m, const std::string& text, const char* finish_reason, bool usage_null,
                         size_t index = 0);

// JSON text, invalid UTF-8 replaced (model output may split a character only at a bad token).
std::string Dump(const Json& j);
std::string SseData(const Json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSsePing = ": ping\n\n";

}  // namespace phi4mm::server
