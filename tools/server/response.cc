// Response and chunk objects, usage, log-probabilities and SSE framing (response.h).
#include "response.h"

#include <cmath>

namespace phi4mm::server {

const char* FinishReasonString(FinishReason r, bool tool_calls) {
  // An answer cut by max_tokens says so even when it holds calls (the last one may be incomplete).
  if (tool_calls && (r == FinishReason::kEos || r == FinishReason::kStopString)) return "tool_calls";
  switch (r) {
    case FinishReason::kEos:
    case FinishReason::kStopString:
      return "stop";
    default:
      return "length";
  }
}

namespace {
// Speculative decoding (a prediction or prompt lookup): OpenAI's Predicted Outputs counts, of the
// drafted tokens, those the answer took and those it did not; absent when nothing was drafted.
void SetDraftCounts(int64_t drafted, int64_t accepted, Json* u) {
  if (drafted > 0)
    (*u)["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                         {"rejected_prediction_tokens", drafted - accepted}};
  else
    u->erase("completion_tokens_details");
}
}  // namespace

Json UsageJson(const RequestResult& r, int64_t dynamic_hd) {
  int64_t image = 0, audio = 0;
  for (int64_t n : r.count.image_tokens) image += n;
  for (int64_t n : r.count.audio_tokens) audio += n;
  const int64_t prompt = r.count.total_tokens;
  const int64_t completion = static_cast<int64_t>(r.generation.tokens.size());
  Json u = {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details",
             {{"cached_tokens", r.cached_prompt_tokens}, {"image_tokens", image}, {"audio_tokens", audio}}}};
  if (!r.count.image_tokens.empty()) u["dynamic_hd"] = dynamic_hd;
  SetDraftCounts(r.generation.draft_tokens, r.generation.accepted_draft_tokens, &u);
  return u;
}

Json UsageJson(std::span<const RequestResult> choices, int64_t dynamic_hd) {
  Json u = UsageJson(choices.front(), dynamic_hd);
  int64_t completion = 0;
  for (const RequestResult& r : choices) completion += static_cast<int64_t>(r.generation.tokens.size());
  u["completion_tokens"] = completion;
  u["total_tokens"] = u["prompt_tokens"].get<int64_t>() + completion;
  int64_t drafted = 0, accepted = 0;
  for (const RequestResult& r : choices) {
    drafted += r.generation.draft_tokens;
    accepted += r.generation.accepted_draft_tokens;
  }
  SetDraftCounts(drafted, accepted, &u);
  return u;
}

namespace {
Json TokenEntry(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string bytes = tok.TokenBytes(id);
  Json b = Json::array();
  for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
  return {{"token", bytes}, {"logprob", logprob}, {"bytes", std::move(b)}};
}
}  // namespace

Json LogprobsJson(const Tokenizer& tok, std::span<const TokenLogprobs> lps) {
  Json content = Json::array();
  for (const TokenLogprobs& lp : lps) {
    Json e = TokenEntry(tok, lp.id, lp.logprob);
    Json top = Json::array();
    // Tokens an output constraint ruled out (log-probability -inf) are not among the most likely.
    for (const auto& [id, v] : lp.top)
      if (std::isfinite(v)) top.push_back(TokenEntry(tok, id, v));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

Json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  Json a = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    a.push_back(std::move(c));
  }
  return a;
}

Json ChatChoiceJson(size_t index, const std::string& content, const std::vector<ToolCall>& calls,
                    const char* finish_reason, const Json* logprobs) {
  Json msg = {{"role", "assistant"}};
  msg["content"] = content.empty() && !calls.empty() ? Json(nullptr) : Json(content);
  if (!calls.empty()) msg["tool_calls"] = ToolCallsJson(calls, false);
  Json choice = {{"index", index}, {"message", std::move(msg)}, {"finish_reason", finish_reason}};
  choice["logprobs"] = logprobs ? *logprobs : Json(nullptr);
  return choice;
}

Json ChatCompletionJson(const ResponseMeta& m, Json choices, const Json& usage) {
  return {{"id", m.id},          {"object", "chat.completion"}, {"created", m.created},
          {"model", m.model},    {"choices", std::move(choices)},
          {"usage", usage},      {"system_fingerprint", m.fingerprint}};
}

Json ChatChunkJson(const ResponseMeta& m, Json delta, const char* finish_reason, bool usage_null,
                   const Json* logprobs, size_t index) {
  Json choice = {{"index", index}, {"delta", std::move(delta)}};
  choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
  choice["logprobs"] = logprobs ? *logprobs : Json(nullptr);
  Json c = {{"id", m.id},       {"object", "chat.completion.chunk"}, {"created", m.created},
            {"model", m.model}, {"system_fingerprint", m.fingerprint}, {"choices", Json::array({std::move(choice)})}};
  if (usage_null) c["usage"] = nullptr;
  return c;
}

Json UsageChunkJson(const ResponseMeta& m, const Json& usage, bool chat) {
  return {{"id", m.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"system_fingerprint", m.fingerprint},
          {"choices", Json::array()},
          {"usage", usage}};
}

Json CompletionChoiceJson(size_t index, const std::string& text, const char* finish_reason) {
  return {{"index", index}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
}

Json CompletionJson(const ResponseMeta& m, Json choices, const Json& usage) {
  return {{"id", m.id},       {"object", "text_completion"}, {"created", m.created},
          {"model", m.model}, {"choices", std::move(choices)},
          {"usage", usage},   {"system_fingerprint", m.fingerprint}};
}

Json CompletionChunkJson(const ResponseMeta& m, const std::string& text, const char* finish_reason, bool usage_null,
                         size_t index) {
  Json choice = {{"index", index}, {"text", text}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
  Json c = {{"id", m.id},       {"object", "text_completion"}, {"created", m.created},
            {"model", m.model}, {"system_fingerprint", m.fingerprint}, {"choices", Json::array({std::move(choice)})}};
  if (usage_null) c["usage"] = nullptr;
  return c;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseData(const Json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace phi4mm::server
