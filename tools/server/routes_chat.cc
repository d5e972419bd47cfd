// POST /v1/chat/completions, /v1/completions and /v1/chat/completions/input_tokens, on the HTTP
// workers: body -> ParsedRequest -> the engine (or, for input_tokens, CountPrompt without any
// encoder).
#include "json_fields.h"
#include "response.h"
#include "phi4mm/models/lora_mode.h"
#include "phi4mm/runtime/media.h"
#include "server_internal.h"

namespace phi4mm::server {

bool ParseApiRequest(Server::Impl& s, http::Request& req, const http::Exchange& ex, bool chat, ParsedRequest* out,
                     ModelFacts* facts_out, bool answer_streams) {
  Json body;
  ApiError e = ParseBody(req.body, s.opts.limits.max_json_depth, &body);
  req.body.Clear();
  if (!e.ok()) {
    s.SendError(ex, e);
    return false;
  }
  // A streamed answer can tell a half-closed client from one that left (http_server.h).
  if (const Json* st = Member(body, "stream"); answer_streams && st != nullptr && st->is_boolean() && st->get<bool>())
    ex.SetHalfCloseProbe(std::string(kSsePing));
  ModelFacts facts;
  {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    if (!s.model) {
      s.SendError(ex, Unavailable("the server is shutting down", 5));
      return false;
    }
    facts = s.Facts();
  }
  e = chat ? ParseChatRequest(body, s.opts.limits, facts, out) : ParseCompletionRequest(body, s.opts.limits, facts, out);
  if (!e.ok()) {
    s.SendError(ex, e);
    return false;
  }
  if (NeedsModel(*out)) {
    std::shared_ptr<const Model> model;
    {
      std::shared_lock<std::shared_mutex> l(s.model_mu);
      model = s.model;
    }
    if (!model) {
      s.SendError(ex, Unavailable("the server is shutting down", 5));
      return false;
    }
    if (e = ResolveWithModel(*model, out); !e.ok()) {
      s.SendError(ex, e);
      return false;
    }
  }
  if (facts_out != nullptr) *facts_out = facts;
  return true;
}

namespace {

// The input_tokens answer: the prompt's tokens by kind, without running any encoder.
void CountTokens(Server::Impl& s, const ParsedRequest& p, const http::Exchange& ex) {
  std::shared_ptr<const Model> model;
  {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    model = s.model;
  }
  if (!model) return s.SendError(ex, Unavailable("the server is shutting down", 5));
  const EngineRequest& er = p.engine;
  auto count = CountPrompt(model->config(), model->tokenizer(), er.prompt, er.media, er.prompt_options);
  if (!count.ok()) return s.SendError(ex, FromStatus(count.status(), "messages"));
  Json out = {{"object", "response.input_tokens"},
              {"input_tokens", count->total_tokens},
              {"text_tokens", count->text_tokens},
              {"image_tokens", count->image_tokens},
              {"audio_tokens", count->audio_tokens},
              {"lora_mode", LoraModeName(LoraModeForInputs(!er.media.images.empty(), !er.media.audios.empty()))}};
  if (!er.media.images.empty()) out["dynamic_hd"] = p.dynamic_hd;
  if (count->total_tokens > model->context_length())
    out["warning"] = "the prompt is longer than the model's context of " + std::to_string(model->context_length());
  http::Response r;
  r.body = out.dump();
  ex.Send(std::move(r));
}

}  // namespace

void InstallChatRoutes(Server::Impl& s) {
  using Run = http::Server::Run;
  s.http.Route("POST", "/v1/chat/completions", Run::kWorker, [&s](http::Request& req, http::Exchange ex) {
    ParsedRequest p;
    ModelFacts facts;
    if (!ParseApiRequest(s, req, ex, true, &p, &facts)) return;
    OutputFormat f;
    f.kind = OutputFormat::kChat;
    f.stream = p.stream;
    f.include_usage = p.stream && p.include_usage;
    f.tools = p.tools;
    f.tool_grammar = p.output.kind == OutputRequest::Kind::kToolCalls;
    f.logprobs = p.logprobs;
    f.dynamic_hd = p.dynamic_hd;
    s.AdmitMedia(std::move(p), facts, ex, /*counting=*/false,
                 [&s, f, ex](ParsedRequest admitted, std::shared_ptr<http::BudgetHold> hold, int64_t held) {
                   s.Generate(std::move(admitted), f, ex, std::move(hold), held);
                 });
  });

  s.http.Route("POST", "/v1/completions", Run::kWorker, [&s](http::Request& req, http::Exchange ex) {
    ParsedRequest p;
    if (!ParseApiRequest(s, req, ex, false, &p)) return;
    OutputFormat f;
    f.kind = OutputFormat::kCompletion;
    f.stream = p.stream;
    f.include_usage = p.stream && p.include_usage;
    s.Generate(std::move(p), f, ex);
  });

  s.http.Route("POST", "/v1/chat/completions/input_tokens", Run::kWorker, [&s](http::Request& req, http::Exchange ex) {
    ParsedRequest p;
    ModelFacts facts;
    if (!ParseApiRequest(s, req, ex, true, &p, &facts)) return;
    // Images are counted from their size; clips are decoded (their tokens follow the log-mel frames).
    s.AdmitMedia(std::move(p), facts, ex, /*counting=*/true,
                 [&s, ex](ParsedRequest admitted, std::shared_ptr<http::BudgetHold>, int64_t) {
                   CountTokens(s, admitted, ex);
                 });
  });
}

}  // namespace phi4mm::server
