// One generation from admission to the last byte (server_internal.h). Submit to the engine, one
// request per choice (`n`; the choices after the first share the first's prompt prefill and
// sample with seed + index); its refusals become 400/429/503 before any byte is sent. Then the
// engine's callbacks drive the answer: a streamed one as SSE chunks (role chunk, content and tool-call deltas, final chunk,
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

// Formats the answer of a request's choices (n of them, each its own engine request) from the
// engine thread's callbacks. Events that arrive before Begin (the engine can be that quick) wait
// in each choice's `early`. The response is complete when every choice has ended; a choice that
// fails fails the response (and the other choices are cancelled).
struct Writer {
  Server::Impl* server;
  std::shared_ptr<const Model> model;
  std::shared_ptr<Call> call;
  http::Exchange ex;
  OutputFormat fmt;
  ResponseMeta meta;
  std::vector<http::Header> headers;  // of the answer (x-phi4mm-ignored-fields)

  struct Early {
    std::string text;
    int32_t token;
    std::optional<TokenLogprobs> logprobs;
  };
  struct Choice {
    explicit Choice(const OutputFormat& f) : answer(f.tools, f.tool_grammar) {}
    AnswerBuilder answer;
    std::vector<TokenLogprobs> logprobs;  // of the tokens not yet sent (stream) or all (non-stream)
    std::vector<Early> early;
    std::optional<std::pair<Status, RequestResult>> done;
  };

  std::mutex mu;
  std::vector<Choice> choices;
  size_t ended = 0;
  bool begun = false;
  bool failed = false;  // the error went out; later events are dropped

  Writer(Server::Impl* s, std::shared_ptr<const Model> m, std::shared_ptr<Call> c, http::Exchange e,
         const OutputFormat& f, ResponseMeta mt, size_t n)
      : server(s), model(std::move(m)), call(std::move(c)), ex(std::move(e)), fmt(f), meta(std::move(mt)) {
    for (size_t i = 0; i < n; ++i) choices.emplace_back(f);
  }

  bool chat() const { return fmt.kind == OutputFormat::kChat; }

  // Stream chunks for the text (and log-probabilities) of choice i that became final.
  void StreamDelta(size_t i, const std::string& text) {
    Choice& c = choices[i];
    if (text.empty() && c.logprobs.empty()) return;
    Json chunk;
    if (chat()) {
      Json lp;
      if (fmt.logprobs) lp = LogprobsJson(model->tokenizer(), c.logprobs);
      chunk = ChatChunkJson(meta, {{"content", text}}, nullptr, fmt.include_usage, fmt.logprobs ? &lp : nullptr, i);
    } else {
      if (text.empty()) return;
      chunk = CompletionChunkJson(meta, text, nullptr, fmt.include_usage, i);
    }
    c.logprobs.clear();
    ex.Write(SseData(chunk));
  }

  // Tool-call chunks in OpenAI's delta shape: index, id, type and name first, then fragments of
  // the arguments.
  void StreamCallDeltas(size_t i) {
    for (const ToolCallDelta& d : choices[i].answer.TakeCallDeltas()) {
      Json call_delta = {{"index", d.index}};
      if (d.header) {
        call_delta["id"] = d.id;
        call_delta["type"] = "function";
        call_delta["function"] = {{"name", d.name}, {"arguments", d.arguments}};
      } else {
        call_delta["function"] = {{"arguments", d.arguments}};
      }
      ex.Write(SseData(ChatChunkJson(meta, {{"tool_calls", Json::array({std::move(call_delta)})}}, nullptr,
                                     fmt.include_usage, nullptr, i)));
    }
  }

  // The error an ended choice answers with (ok() when it has an answer); counts a timeout.
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

  void Event(size_t i, const std::string& text, int32_t token, const TokenLogprobs* lp) {
    if (failed) return;
    Choice& c = choices[i];
    std::string delta = c.answer.Push(text, token);
    if (lp) c.logprobs.push_back(*lp);
    if (fmt.stream) StreamDelta(i, delta);
    if (fmt.stream && fmt.tool_grammar) StreamCallDeltas(i);
  }

  // Engine thread.
  void OnEvent(size_t i, const StreamEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    if (!begun) {
      choices[i].early.push_back({std::string(ev.text), ev.token,
                                  ev.logprobs ? std::optional<TokenLogprobs>(*ev.logprobs) : std::nullopt});
      return;
    }
    Event(i, std::string(ev.text), ev.token, ev.logprobs);
  }

  // The response fails with `failure` (mu held): whatever choice i generated goes with the error of
  // a plain answer; the other choices are cancelled.
  void Fail(size_t i, const ApiError& failure, const Status& status, const RequestResult& result) {
    failed = true;
    if (!fmt.stream) {
      http::Response r = server->ErrorResponse(failure);
      if (status.ok() && !result.generation.text.empty()) {
        Json body = Json::parse(r.body, nullptr, false);
        if (body.is_object()) {
          body["error"]["partial_text"] = result.generation.text;
          if (choices.size() > 1) body["error"]["choice"] = i;
          r.body = Dump(body);
        }
      }
      ex.Send(std::move(r));
    } else {
      ex.Write("data: " + ErrorBody(failure) + "\n\n");
      ex.Write(std::string(kSseDone));
      ex.End();
    }
    if (ended < choices.size()) call->CancelHandles();
  }

  // Choice i ended (mu held, begun): a stream gets its last text and final chunk now; the response
  // is complete once every choice has ended.
  void ChoiceEnded(size_t i) {
    Choice& c = choices[i];
    const auto& [status, result] = *c.done;
    if (failed) return;
    const ApiError failure = FailureOf(status, result);
    if (!failure.ok()) return Fail(i, failure, status, result);
    server->metrics.ObserveResult(result);  // answers delivered, not cut-off ones
    const std::string tail = c.answer.Finish();
    if (!fmt.stream) return;
    const bool tool_calls = !c.answer.calls().empty();
    const char* finish = FinishReasonString(result.generation.finish, tool_calls);
    StreamDelta(i, tail);
    if (fmt.tool_grammar) StreamCallDeltas(i);
    if (tool_calls && !fmt.tool_grammar) {
      Json calls = ToolCallsJson(c.answer.calls(), /*with_index=*/true);
      for (Json& tc : calls) {
        Json delta = {{"tool_calls", Json::array({tc})}};
        ex.Write(SseData(ChatChunkJson(meta, std::move(delta), nullptr, fmt.include_usage, nullptr, i)));
      }
    }
    ex.Write(SseData(chat() ? ChatChunkJson(meta, Json::object(), finish, fmt.include_usage, nullptr, i)
                            : CompletionChunkJson(meta, "", finish, fmt.include_usage, i)));
  }

  // Every choice has ended and none failed (mu held): the usage chunk and [DONE], or the body.
  void Complete() {
    std::vector<RequestResult> results;
    for (const Choice& c : choices) results.push_back(c.done->second);
    const Json usage = UsageJson(results, fmt.dynamic_hd);
    if (fmt.stream) {
      if (fmt.include_usage) ex.Write(SseData(UsageChunkJson(meta, usage, chat())));
      ex.Write(std::string(kSseDone));
      ex.End();
      return;
    }
    http::Response r;
    r.headers = headers;
    if (fmt.kind == OutputFormat::kTranscription) {
      const std::string& text = choices.front().answer.content();
      if (fmt.text_only) {
        r.content_type = "text/plain; charset=utf-8";
        r.body = text;
      } else {
        r.body = Dump(Json{{"text", text}, {"usage", usage}});
      }
    } else {
      Json out = Json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        const Choice& c = choices[i];
        const RequestResult& result = c.done->second;
        const char* finish = FinishReasonString(result.generation.finish, !c.answer.calls().empty());
        if (fmt.kind == OutputFormat::kCompletion) {
          out.push_back(CompletionChoiceJson(i, c.answer.content(), finish));
        } else {
          Json lp;
          if (fmt.logprobs) lp = LogprobsJson(model->tokenizer(), result.generation.logprobs);
          out.push_back(ChatChoiceJson(i, c.answer.content(), c.answer.calls(), finish, fmt.logprobs ? &lp : nullptr));
        }
      }
      r.body = Dump(fmt.kind == OutputFormat::kCompletion ? CompletionJson(meta, std::move(out), usage)
                                                          : ChatCompletionJson(meta, std::move(out), usage));
    }
    ex.Send(std::move(r));
  }

  // Choice i's result (mu held, begun).
  void Done(size_t i) {
    ++ended;
    ChoiceEnded(i);
    if (ended < choices.size()) return;
    {
      std::lock_guard<std::mutex> l(call->mu);
      call->ended = true;
    }
    if (!failed) Complete();
    server->EndCall(call);
  }

  // Engine thread (or the one stopping it).
  void OnDone(size_t i, const Status& status, const RequestResult& result) {
    std::lock_guard<std::mutex> l(mu);
    choices[i].done.emplace(status, result);
    if (begun) Done(i);
  }

  // Every choice was submitted: the answer may start (HTTP worker thread).
  void Begin() {
    std::lock_guard<std::mutex> l(mu);
    begun = true;
    if (fmt.stream) {
      std::vector<http::Header> hs = headers;
      hs.push_back({"X-Accel-Buffering", "no"});
      ex.StartStream(200, "text/event-stream", std::move(hs), std::string(kSsePing),
                     std::chrono::milliseconds(static_cast<int64_t>(server->opts.sse_ping_seconds * 1000)));
      if (chat())
        for (size_t i = 0; i < choices.size(); ++i)
          ex.Write(SseData(ChatChunkJson(meta, {{"role", "assistant"}, {"content", ""}}, nullptr, fmt.include_usage,
                                         nullptr, i)));
    }
    for (size_t i = 0; i < choices.size(); ++i) {
      for (const Early& e : choices[i].early) Event(i, e.text, e.token, e.logprobs ? &*e.logprobs : nullptr);
      choices[i].early.clear();
    }
    for (size_t i = 0; i < choices.size(); ++i)
      if (choices[i].done) Done(i);
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
  const size_t n = static_cast<size_t>(std::max<int64_t>(1, req.n));
  auto writer = std::make_shared<Writer>(this, mdl, call, ex, fmt, std::move(meta), n);
  if (!req.ignored_fields.empty()) {
    std::string list;
    for (const std::string& f : req.ignored_fields) list += (list.empty() ? "" : ",") + f;
    writer->headers.push_back({"x-phi4mm-ignored-fields", list});
  }
  req.engine.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(opts.request_timeout_seconds));
  req.engine.media_hold = media_hold;
  req.engine.prompt_options.cancel = &ex.gone_flag();  // the exchange outlives Submit
  // Choice i samples with seed + i; choices after the first wait for its prompt prefill.
  std::vector<EngineRequest> reqs;
  if (n > 1) {
    req.engine.prompt_share = std::make_shared<PromptShare>();
    req.engine.share_leader = true;
  }
  for (size_t i = 1; i < n; ++i) {
    reqs.push_back(req.engine);
    reqs.back().share_leader = false;
    reqs.back().generate.sampling.seed += i;
  }
  reqs.insert(reqs.begin(), std::move(req.engine));
  Metrics* m = &metrics;
  for (size_t i = 0; i < n; ++i) {
    auto last_token = std::make_shared<std::optional<Clock::time_point>>();
    reqs[i].on_event = [writer, m, last_token, ex, i](const StreamEvent& ev) {
      if (ev.token >= 0) {
        const Clock::time_point now = Clock::now();
        if (*last_token) m->ObserveInterToken(std::chrono::duration<double>(now - **last_token).count());
        *last_token = now;
      }
      writer->OnEvent(i, ev);
      return !ex.client_gone();
    };
    reqs[i].on_done = [writer, i](const Status& status, const RequestResult& result) { writer->OnDone(i, status, result); };
  }
  {
    std::lock_guard<std::mutex> l(calls_mu);
    calls.insert(call);
  }
  for (size_t i = 0; i < n; ++i) {
    Result<RequestHandle> handle = Status(StatusCode::kInternal, "not submitted");
    {
      std::shared_lock<std::shared_mutex> l(model_mu);
      if (engine) handle = engine->Submit(std::move(reqs[i]));
      else handle = Cancelled("the server is shutting down");
    }
    if (!handle.ok()) {
      // The choices already queued are cancelled; their callbacks find the writer never begun.
      call->CancelHandles();
      {
        std::lock_guard<std::mutex> l(call->mu);
        call->ended = true;
      }
      EndCall(call);
      if (handle.status().code() == StatusCode::kCancelled && ex.client_gone()) return;
      ApiError e = FromStatus(handle.status(), "messages");
      if (e.status == 429) e.retry_after_seconds = RetryAfterSeconds();
      return SendError(ex, e);
    }
    std::lock_guard<std::mutex> l(call->mu);
    call->handles.push_back(*handle);
  }
  // The decoded images and clips are gone; what the engine keeps until it has encoded them stays.
  if (media_hold) media_hold->ShrinkTo(held_bytes);
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> l(call->mu);
    cancel_now = call->cancel_requested;
  }
  if (cancel_now) call->CancelHandles();
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
