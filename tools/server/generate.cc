// One generation from admission to the last byte (server_internal.h). Submit to the engine (its
// refusals become 400/429/503 before any byte is sent), then the engine's callbacks drive the
// answer: a streamed one as SSE chunks (role chunk, content and tool-call deltas, final chunk,
// optional usage chunk, [DONE]) written as the tokens come, with ": ping" comments while silent; a
// plain one as one response sent when the answer is over, with the status the outcome deserves
// (200, or the error's own status: a failure after admission is never a 200). A client that goes
// away cancels its request in whatever phase (queued, encoding, prefilling, decoding).
#include <algorithm>
#include <cmath>
#include <ctime>

#include "answer_builder.h"
#include "response.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

// Formats the answer from the engine thread's callbacks. Events that arrive before Begin (the
// engine can be that quick) wait in `early`.
struct Writer {
  Server::Impl* server;
  std::shared_ptr<const Model> model;
  std::shared_ptr<Call> call;
  http::Exchange ex;
  OutputFormat fmt;
  ResponseMeta meta;
  std::vector<http::Header> headers;  // of the answer (x-phi4mm-ignored-fields)

  std::mutex mu;
  AnswerBuilder answer;
  std::vector<TokenLogprobs> logprobs;  // of the tokens not yet sent (stream) or all (non-stream)
  bool begun = false;
  struct Early {
    std::string text;
    int32_t token;
    std::optional<TokenLogprobs> logprobs;
  };
  std::vector<Early> early;
  std::optional<std::pair<Status, RequestResult>> early_done;

  Writer(Server::Impl* s, std::shared_ptr<const Model> m, std::shared_ptr<Call> c, http::Exchange e,
         const OutputFormat& f, ResponseMeta mt)
      : server(s), model(std::move(m)), call(std::move(c)), ex(std::move(e)), fmt(f), meta(std::move(mt)),
        answer(f.tools, f.tool_grammar) {}

  bool chat() const { return fmt.kind == OutputFormat::kChat; }

  // Stream chunks for the text (and log-probabilities) that became final.
  void StreamDelta(const std::string& text) {
    if (text.empty() && logprobs.empty()) return;
    Json chunk;
    if (chat()) {
      Json lp;
      if (fmt.logprobs) lp = LogprobsJson(model->tokenizer(), logprobs);
      chunk = ChatChunkJson(meta, {{"content", text}}, nullptr, fmt.include_usage, fmt.logprobs ? &lp : nullptr);
    } else {
      if (text.empty()) return;
      chunk = CompletionChunkJson(meta, text, nullptr, fmt.include_usage);
    }
    logprobs.clear();
    ex.Write(SseData(chunk));
  }

  // The error an ended request answers with (ok() when it has an answer); counts a timeout.
  ApiError FailureOf(const Status& status, const RequestResult& result) {
    std::string reason;
    {
      std::lock_guard<std::mutex> l(call->mu);
      reason = call->cancel_reason;
    }
    ApiError failure;
    if (!status.ok()) {
      failure = FromStatus(status);
      if (failure.status < 500) failure.status = 500, failure.type = "server_error";
    } else if (result.generation.finish == FinishReason::kDeadline) {
      server->metrics.CountCancelled("timeout");
      failure = {504, "timeout_error", "the answer took longer than the server's --request-timeout", "",
                 "request_timeout", 0};
    } else if (result.generation.finish == FinishReason::kCancelled) {
      failure = Unavailable(reason == "shutdown" ? "the server is shutting down; the answer was cut off"
                                                 : "the request was cancelled");
      failure.code = reason == "shutdown" ? "shutting_down" : "cancelled";
    }
    return failure;
  }

  // Tool-call chunks in OpenAI's delta shape: index, id, type and name first, then fragments of
  // the arguments.
  void StreamCallDeltas() {
    for (const ToolCallDelta& d : answer.TakeCallDeltas()) {
      Json call = {{"index", d.index}};
      if (d.header) {
        call["id"] = d.id;
        call["type"] = "function";
        call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
      } else {
        call["function"] = {{"arguments", d.arguments}};
      }
      ex.Write(SseData(ChatChunkJson(meta, {{"tool_calls", Json::array({std::move(call)})}}, nullptr, fmt.include_usage)));
    }
  }

  void Event(const std::string& text, int32_t token, const TokenLogprobs* lp) {
    std::string delta = answer.Push(text, token);
    if (lp) logprobs.push_back(*lp);
    if (fmt.stream) StreamDelta(delta);
    if (fmt.stream && fmt.tool_grammar) StreamCallDeltas();
  }

  // Engine thread.
  void OnEvent(const StreamEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    if (!begun) {
      early.push_back({std::string(ev.text), ev.token,
                       ev.logprobs ? std::optional<TokenLogprobs>(*ev.logprobs) : std::nullopt});
      return;
    }
    Event(std::string(ev.text), ev.token, ev.logprobs);
  }

  // The answer is over: final chunk(s), or the whole body (mu held).
  void Finish(const Status& status, const RequestResult& result) {
    const ApiError failure = FailureOf(status, result);
    if (failure.ok()) server->metrics.ObserveResult(result);  // answers delivered, not cut-off ones
    if (!failure.ok()) {
      if (!fmt.stream) {
        // Whatever was generated before the failure goes with the error, for clients that want it.
        http::Response r = server->ErrorResponse(failure);
        if (status.ok() && !result.generation.text.empty()) {
          Json body = Json::parse(r.body, nullptr, false);
          if (body.is_object()) {
            body["error"]["partial_text"] = result.generation.text;
            r.body = Dump(body);
          }
        }
        ex.Send(std::move(r));
      } else {
        ex.Write("data: " + ErrorBody(failure) + "\n\n");
        ex.Write(std::string(kSseDone));
        ex.End();
      }
      server->EndCall(call);
      return;
    }
    const std::string tail = answer.Finish();
    const bool tool_calls = !answer.calls().empty();
    const char* finish = FinishReasonString(result.generation.finish, tool_calls);
    const Json usage = UsageJson(result, fmt.dynamic_hd);
    if (fmt.stream) {
      StreamDelta(tail);
      if (fmt.tool_grammar) StreamCallDeltas();
      if (tool_calls && !fmt.tool_grammar) {
        Json calls = ToolCallsJson(answer.calls(), /*with_index=*/true);
        for (Json& c : calls) {
          Json delta = {{"tool_calls", Json::array({c})}};
          ex.Write(SseData(ChatChunkJson(meta, std::move(delta), nullptr, fmt.include_usage)));
        }
      }
      const Json last = chat() ? ChatChunkJson(meta, Json::object(), finish, fmt.include_usage)
                               : CompletionChunkJson(meta, "", finish, fmt.include_usage);
      ex.Write(SseData(last));
      if (fmt.include_usage) ex.Write(SseData(UsageChunkJson(meta, usage, chat())));
      ex.Write(std::string(kSseDone));
      ex.End();
      server->EndCall(call);
      return;
    }
    http::Response r;
    r.headers = headers;
    if (fmt.kind == OutputFormat::kTranscription) {
      if (fmt.text_only) {
        r.content_type = "text/plain; charset=utf-8";
        r.body = answer.content();
      } else {
        r.body = Dump(Json{{"text", answer.content()}, {"usage", usage}});
      }
    } else if (fmt.kind == OutputFormat::kCompletion) {
      r.body = Dump(CompletionJson(meta, answer.content(), finish, usage));
    } else {
      Json lp;
      if (fmt.logprobs) lp = LogprobsJson(model->tokenizer(), result.generation.logprobs);
      r.body = Dump(ChatCompletionJson(meta, answer.content(), answer.calls(), finish, usage, fmt.logprobs ? &lp : nullptr));
    }
    ex.Send(std::move(r));
    server->EndCall(call);
  }

  // Engine thread (or the one stopping it).
  void OnDone(const Status& status, const RequestResult& result) {
    {
      std::lock_guard<std::mutex> l(call->mu);
      call->ended = true;
    }
    std::lock_guard<std::mutex> l(mu);
    if (!begun) {
      early_done.emplace(status, result);
      return;
    }
    Finish(status, result);
  }

  // Submit returned a handle: the answer may start (HTTP worker thread).
  void Begin() {
    std::lock_guard<std::mutex> l(mu);
    begun = true;
    if (fmt.stream) {
      std::vector<http::Header> hs = headers;
      hs.push_back({"X-Accel-Buffering", "no"});
      ex.StartStream(200, "text/event-stream", std::move(hs), std::string(kSsePing),
                     std::chrono::milliseconds(static_cast<int64_t>(server->opts.sse_ping_seconds * 1000)));
      if (chat()) ex.Write(SseData(ChatChunkJson(meta, {{"role", "assistant"}, {"content", ""}}, nullptr, fmt.include_usage)));
    }
    for (const Early& e : early) Event(e.text, e.token, e.logprobs ? &*e.logprobs : nullptr);
    early.clear();
    if (early_done) Finish(early_done->first, early_done->second);
  }
};

}  // namespace

void Server::Impl::Generate(ParsedRequest req, const OutputFormat& fmt, const http::Exchange& ex,
                            std::shared_ptr<http::BudgetHold> media_hold, int64_t held_bytes) {
  auto call = std::make_shared<Call>();
  call->metrics = &metrics;
  ResponseMeta meta;
  meta.id = RandomId(fmt.kind == OutputFormat::kChat ? "chatcmpl-" : "cmpl-", 32);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = opts.served_name;
  meta.fingerprint = "phi4mm-" + opts.build.version + "-" + opts.build.quant;
  std::shared_ptr<const Model> mdl;
  {
    std::shared_lock<std::shared_mutex> l(model_mu);
    if (!engine) return SendError(ex, Unavailable("the server is shutting down", 5));
    mdl = model;
  }
  auto writer = std::make_shared<Writer>(this, mdl, call, ex, fmt, std::move(meta));
  if (!req.ignored_fields.empty()) {
    std::string list;
    for (const std::string& f : req.ignored_fields) list += (list.empty() ? "" : ",") + f;
    writer->headers.push_back({"x-phi4mm-ignored-fields", list});
  }
  Metrics* m = &metrics;
  auto last_token = std::make_shared<std::optional<Clock::time_point>>();
  req.engine.on_event = [writer, m, last_token, ex](const StreamEvent& ev) {
    if (ev.token >= 0) {
      const Clock::time_point now = Clock::now();
      if (*last_token) m->ObserveInterToken(std::chrono::duration<double>(now - **last_token).count());
      *last_token = now;
    }
    writer->OnEvent(ev);
    return !ex.client_gone();
  };
  req.engine.on_done = [writer](const Status& status, const RequestResult& result) { writer->OnDone(status, result); };
  req.engine.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(opts.request_timeout_seconds));
  req.engine.media_hold = media_hold;
  req.engine.prompt_options.cancel = &ex.gone_flag();  // the exchange outlives Submit
  {
    std::lock_guard<std::mutex> l(calls_mu);
    calls.insert(call);
  }
  Result<RequestHandle> handle = Status(StatusCode::kInternal, "not submitted");
  {
    std::shared_lock<std::shared_mutex> l(model_mu);
    if (engine) handle = engine->Submit(std::move(req.engine));
    else handle = Cancelled("the server is shutting down");
  }
  if (!handle.ok()) {
    EndCall(call);
    if (handle.status().code() == StatusCode::kCancelled && ex.client_gone()) return;
    ApiError e = FromStatus(handle.status(), "messages");
    if (e.status == 429) e.retry_after_seconds = RetryAfterSeconds();
    return SendError(ex, e);
  }
  // The decoded images and clips are gone; what the engine keeps until it has encoded them stays.
  if (media_hold) media_hold->ShrinkTo(held_bytes);
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> l(call->mu);
    call->handle = *handle;
    cancel_now = call->cancel_requested;
  }
  if (cancel_now) handle->Cancel();
  ex.OnClientGone([call] { call->Cancel("disconnect"); });
  writer->Begin();
}

int Server::Impl::RetryAfterSeconds() const {
  std::shared_lock<std::shared_mutex> l(model_mu);
  if (!engine) return 5;
  const EngineStats st = engine->stats();
  // The queue ahead drains max_running requests per recent request time.
  const double wait = static_cast<double>(st.waiting + 1) * metrics.RecentRequestSeconds() /
                      static_cast<double>(std::max<int64_t>(1, engine->options().max_running));
  return static_cast<int>(std::clamp(std::ceil(wait), 1.0, 120.0));
}

void Server::Impl::EndCall(const std::shared_ptr<Call>& call) {
  std::lock_guard<std::mutex> l(calls_mu);
  calls.erase(call);
  calls_cv.notify_all();
}

}  // namespace phi4mm::server
