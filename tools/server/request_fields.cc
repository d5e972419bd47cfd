// The generation fields shared by /v1/chat/completions and /v1/completions (request.h): limits,
// sampling, penalties, stop strings, logit bias, log-probabilities, and the fields that are refused
// because phi4mm cannot honour them (audio output, legacy functions), and speculative decoding
// (the server's default, a request's own `speculative`, OpenAI's `prediction`).
#include "request_internal.h"

#include <random>

namespace phi4mm::server {

void ParseGeneration(const Json& b, const ServerLimits& limits, const ModelFacts& facts, bool chat,
                     ParsedRequest* out) {
  GenerateOptions& g = out->engine.generate;
  SamplingOptions& s = g.sampling;
  out->model = OptString(b, "model", "").value_or("");

  // Length.
  std::optional<int64_t> max_new = OptInt(b, "max_completion_tokens", "", 1, facts.context_length);
  if (!max_new) max_new = OptInt(b, "max_tokens", "", 1, facts.context_length);
  g.max_new_tokens = max_new.value_or(chat ? limits.default_max_tokens : 16);

  // Sampling.
  s.temperature = static_cast<float>(OptNumber(b, "temperature", "", 0.0, 2.0).value_or(0.0));
  s.top_p = static_cast<float>(OptNumber(b, "top_p", "", 0.0, 1.0).value_or(1.0));
  if (s.top_p <= 0.0f) Fail("top_p", "top_p must be greater than 0 and at most 1", "out_of_range");
  s.top_k = static_cast<int>(OptInt(b, "top_k", "", -1, 1 << 20).value_or(0));
  if (s.top_k < 0) s.top_k = 0;  // vLLM's -1 = off
  s.min_p = static_cast<float>(OptNumber(b, "min_p", "", 0.0, 1.0).value_or(0.0));
  s.repetition_penalty = static_cast<float>(OptNumber(b, "repetition_penalty", "", 1e-3, 100.0).value_or(1.0));
  s.frequency_penalty = static_cast<float>(OptNumber(b, "frequency_penalty", "", -2.0, 2.0).value_or(0.0));
  s.presence_penalty = static_cast<float>(OptNumber(b, "presence_penalty", "", -2.0, 2.0).value_or(0.0));
  if (auto seed = OptInt(b, "seed", "", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*seed);
  } else {
    static std::mt19937_64 rng{std::random_device{}()};
    static std::mutex mu;
    std::lock_guard<std::mutex> l(mu);
    s.seed = rng();  // OpenAI: without a seed, sampled answers differ between calls
  }

  // Stop strings.
  if (const Json* stop = Member(b, "stop")) {
    std::vector<std::string> stops;
    if (stop->is_string()) {
      stops.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (static_cast<int64_t>(stop->size()) > limits.max_stop_strings)
        Fail("stop", "stop holds at most " + std::to_string(limits.max_stop_strings) + " strings, got " +
                         std::to_string(stop->size()), "out_of_range");
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) Fail(Index("stop", i), Index("stop", i) + " must be a string", "invalid_type");
        stops.push_back((*stop)[i].get<std::string>());
      }
    } else {
      Fail("stop", "stop must be a string or an array of strings, got " + TypeName(*stop), "invalid_type");
    }
    for (size_t i = 0; i < stops.size(); ++i)
      if (stops[i].empty()) Fail("stop", "stop strings must not be empty", "out_of_range");
    g.stop_strings = std::move(stops);
  }

  // Logit bias: {"<token id>": bias}.
  if (const Json* lb = OptObject(b, "logit_bias", "")) {
    if (lb->size() > 300) Fail("logit_bias", "logit_bias holds at most 300 entries", "out_of_range");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string p = "logit_bias." + it.key();
      char* end = nullptr;
      const long long id = std::strtoll(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || id < 0 || id >= facts.vocab_size)
        Fail(p, "logit_bias keys must be token ids in [0, " + std::to_string(facts.vocab_size) + "), got '" +
                    it.key() + "'", "out_of_range");
      if (!it->is_number()) Fail(p, p + " must be a number", "invalid_type");
      const double v = it->get<double>();
      if (!(v >= -100.0 && v <= 100.0)) Fail(p, p + " must be between -100 and 100", "out_of_range");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
    }
  }

  // Log-probabilities (chat: logprobs bool + top_logprobs; legacy completions: refused).
  if (chat) {
    out->logprobs = OptBool(b, "logprobs", "").value_or(false);
    out->top_logprobs = static_cast<int>(OptInt(b, "top_logprobs", "", 0, kMaxTopLogprobs).value_or(0));
    if (out->top_logprobs > 0 && !out->logprobs)
      Fail("top_logprobs", "top_logprobs needs logprobs: true", "invalid_value");
    s.logprobs = out->logprobs;
    s.top_logprobs = out->top_logprobs;
  } else if (Member(b, "logprobs")) {
    Fail("logprobs", "logprobs is not supported on /v1/completions; use /v1/chat/completions with logprobs: true",
         "not_supported");
  }

  // Choices: each its own engine request (seed + index), the prompt prefilled once.
  if (auto n = OptInt(b, "n", "", 1, 128)) {
    if (*n > limits.max_choices)
      Fail("n", "n is at most " + std::to_string(limits.max_choices) + " on this server", "out_of_range");
    out->n = *n;
  }

  // Streaming.
  out->stream = OptBool(b, "stream", "").value_or(false);
  if (const Json* so = OptObject(b, "stream_options", "")) {
    out->include_usage = OptBool(*so, "include_usage", "stream_options").value_or(false);
    (void)OptBool(*so, "include_obfuscation", "stream_options");
    (void)OptBool(*so, "continuous_usage_stats", "stream_options");
  }

  // Structured output; output formats phi4mm cannot produce.
  ParseResponseFormat(b, out);
  if (const Json* m = OptArray(b, "modalities", "")) {
    for (size_t i = 0; i < m->size(); ++i)
      if (!(*m)[i].is_string() || (*m)[i].get<std::string>() != "text")
        Fail(Index("modalities", i), "this model answers in text only; modalities may only contain \"text\"",
             "not_supported");
  }
  // Speculative decoding: the server's default, a request's own choice (a phi4mm extension), and
  // OpenAI's Predicted Outputs, whose content drafts the answer. None changes the answer.
  g.speculative.mode = limits.speculative;
  g.speculative.max_draft = limits.draft_max;
  if (auto mode = OptString(b, "speculative", "")) {
    const std::optional<SpeculativeMode> m = ParseSpeculativeMode(*mode);
    if (!m) Fail("speculative", "speculative must be \"none\" or \"ngram\", got \"" + *mode + "\"", "invalid_value");
    g.speculative.mode = *m;
  }
  if (const Json* pred = OptObject(b, "prediction", "")) {
    if (OptString(*pred, "type", "prediction").value_or("") != "content")
      Fail("prediction.type", "prediction.type must be \"content\"", "invalid_value");
    const Json* content = Member(*pred, "content");
    std::string text;
    if (content != nullptr && content->is_string()) {
      text = content->get<std::string>();
    } else if (content != nullptr && content->is_array()) {
      for (size_t i = 0; i < content->size(); ++i) {
        const Json& part = (*content)[i];
        const std::string at = Index("prediction.content", i);
        if (!part.is_object()) Fail(at, at + " must be a text part", "invalid_type");
        if (OptString(part, "type", at).value_or("") != "text") Fail(at + ".type", at + ".type must be \"text\"", "invalid_value");
        text += OptString(part, "text", at).value_or("");
      }
    } else {
      Fail("prediction.content", "prediction.content must be a string or an array of text parts", "invalid_type");
    }
    out->prediction = std::move(text);
  }
  for (const char* f : {"audio", "functions", "function_call", "web_search_options"})
    if (Member(b, f))
      Fail(f, std::string(f) + " is not supported by this server" +
                  (std::string(f).rfind("function", 0) == 0 ? "; use tools / tool_choice" : ""),
           "not_supported");
  if (!chat) {
    if (Member(b, "suffix")) Fail("suffix", "suffix (insertion) is not supported", "not_supported");
    if (auto echo = OptBool(b, "echo", ""); echo && *echo) Fail("echo", "echo is not supported", "not_supported");
    if (auto bo = OptInt(b, "best_of", "", 1, 128); bo && *bo != 1)
      Fail("best_of", "best_of must be 1", "not_supported");
  }

  // Accepted and ignored (they do not change the answer).
  (void)OptString(b, "user", "");
  (void)OptString(b, "service_tier", "");
  (void)OptString(b, "reasoning_effort", "");
  (void)OptBool(b, "store", "");
  (void)OptBool(b, "parallel_tool_calls", "");
  (void)OptObject(b, "metadata", "");

  if (Status st = g.Validate(facts.vocab_size); !st.ok()) Fail("", st.message(), "invalid_value");
}

ApiError ApplyPrediction(const Model& model, ParsedRequest* p) {
  if (!p->prediction || p->prediction->empty()) return ApiError();
  // More than the context is never useful as a draft; refuse rather than tokenize megabytes.
  const size_t most_bytes = static_cast<size_t>(model.context_length()) * 8;
  if (p->prediction->size() > most_bytes)
    return InvalidRequest("prediction.content", "prediction.content holds " + std::to_string(p->prediction->size()) +
                                                    " bytes; at most " + std::to_string(most_bytes) + " are accepted",
                          "out_of_range");
  auto ids = model.tokenizer().Encode(*p->prediction);
  if (!ids.ok()) return InvalidRequest("prediction.content", "prediction.content: " + ids.status().message(), "invalid_value");
  p->engine.generate.speculative.prediction = std::move(ids).value();
  return ApiError();
}

bool NeedsModel(const ParsedRequest& p) { return p.output.kind != OutputRequest::Kind::kNone || p.prediction; }

ApiError ResolveWithModel(const Model& model, ParsedRequest* p) {
  if (p->output.kind != OutputRequest::Kind::kNone)
    if (ApiError e = CompileOutput(model, p); !e.ok()) return e;
  return ApplyPrediction(model, p);
}

ModelFacts FactsOf(const Model& model) {
  ModelFacts f;
  f.context_length = model.context_length();
  f.vocab_size = model.embedding().vocab_size();
  f.checkpoint_dynamic_hd = model.config().preprocessor.dynamic_hd;
  f.crop_size = model.config().vision.crop_size;
  f.patch_size = model.config().vision.patch_size;
  f.max_token_bytes = model.tokenizer().max_token_bytes();
  return f;
}

void CollectIgnored(const Json& b, std::span<const std::string_view> known, ParsedRequest* out) {
  for (auto it = b.begin(); it != b.end(); ++it) {
    bool found = false;
    for (std::string_view k : known) found = found || it.key() == k;
    if (!found) out->ignored_fields.push_back(it.key());
  }
}

}  // namespace phi4mm::server
