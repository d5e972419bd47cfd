// POST /v1/chat/completions, /v1/completions and /v1/chat/completions/input_tokens: body ->
// ParsedRequest -> the engine (or, for input_tokens, CountPrompt without any encoder).
#include "json_fields.h"
#include "phi4mm/models/lora_mode.h"
#include "phi4mm/runtime/media.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

// Parses the body and the request; false (with the error sent) when either is bad.
bool Parse(Server::Impl& s, const httplib::Request& req, httplib::Response& res, bool chat, ParsedRequest* out) {
  Json body;
  if (ApiError e = ParseBody(req.body, s.opts.limits.max_json_depth, &body); !e.ok()) {
    s.SendError(res, e);
    return false;
  }
  ModelFacts facts;
  {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    if (!s.model) {
      s.SendError(res, Unavailable("the server is shutting down", 5));
      return false;
    }
    facts = s.Facts();
  }
  ApiError e = chat ? ParseChatRequest(body, s.opts.limits, facts, out)
                    : ParseCompletionRequest(body, s.opts.limits, facts, out);
  if (!e.ok()) {
    s.SendError(res, e);
    return false;
  }
  return true;
}

}  // namespace

void InstallChatRoutes(Server::Impl& s) {
  s.http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    ParsedRequest p;
    if (!Parse(s, req, res, true, &p)) return;
    OutputFormat f;
    f.kind = OutputFormat::kChat;
    f.stream = p.stream;
    f.include_usage = p.stream && p.include_usage;
    f.tools = p.tools;
    f.logprobs = p.logprobs;
    f.dynamic_hd = p.dynamic_hd;
    s.Generate(std::move(p), f, res);
  });

  s.http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    ParsedRequest p;
    if (!Parse(s, req, res, false, &p)) return;
    OutputFormat f;
    f.kind = OutputFormat::kCompletion;
    f.stream = p.stream;
    f.include_usage = p.stream && p.include_usage;
    s.Generate(std::move(p), f, res);
  });

  s.http.Post("/v1/chat/completions/input_tokens", [&s](const httplib::Request& req, httplib::Response& res) {
    ParsedRequest p;
    if (!Parse(s, req, res, true, &p)) return;
    std::shared_ptr<const Model> model;
    {
      std::shared_lock<std::shared_mutex> l(s.model_mu);
      model = s.model;
    }
    const EngineRequest& er = p.engine;
    auto count = CountPrompt(model->config(), model->tokenizer(), er.prompt, er.media, er.prompt_options);
    if (!count.ok()) return s.SendError(res, FromStatus(count.status(), "messages"));
    Json out = {{"object", "response.input_tokens"},
                {"input_tokens", count->total_tokens},
                {"text_tokens", count->text_tokens},
                {"image_tokens", count->image_tokens},
                {"audio_tokens", count->audio_tokens},
                {"lora_mode", LoraModeName(LoraModeForInputs(!er.media.images.empty(), !er.media.audios.empty()))}};
    if (!er.media.images.empty()) out["dynamic_hd"] = p.dynamic_hd;
    if (count->total_tokens > model->context_length())
      out["warning"] = "the prompt is longer than the model's context of " + std::to_string(model->context_length());
    res.set_content(out.dump(), "application/json");
  });
}

}  // namespace phi4mm::server
