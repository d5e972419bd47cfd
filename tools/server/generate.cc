// One generation from admission to the last byte (server_internal.h): Submit to the engine (its
// refusals become 400/429/503 before any byte is sent), then a chunked response whose writer runs
// on the HTTP thread. The writer turns engine events into SSE chunks (role chunk, content and
// tool-call deltas, final chunk, optional usage chunk, [DONE]) or, for a non-streaming request,
// one JSON body at the end, preceded by single spaces while the answer is far away (valid JSON
// whitespace that also probes the connection; an answer that fails within 250 ms gets its real
// status instead). Every ≤50 ms it checks the connection: a client
// that went away cancels its request in whatever phase (queued, encoding, prefilling, decoding).
#include <ctime>

#include "answer_builder.h"
#include "response.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

struct Writer {
  Server::Impl* server;
  std::shared_ptr<const Model> model;
  std::shared_ptr<Call> call;
  OutputFormat fmt;
  ResponseMeta meta;
  AnswerBuilder answer;
  std::vector<TokenLogprobs> logprobs;  // of the tokens not yet sent (stream) or all (non-stream)
  bool started = false, finished = false;
  Clock::time_point last_write = Clock::now();

  Writer(Server::Impl* s, std::shared_ptr<const Model> m, std::shared_ptr<Call> c, const OutputFormat& f,
         ResponseMeta mt)
      : server(s), model(std::move(m)), call(std::move(c)), fmt(f), meta(std::move(mt)), answer(f.tools) {}

  bool chat() const { return fmt.kind == OutputFormat::kChat; }

  bool Write(httplib::DataSink& sink, std::string_view bytes) {
    last_write = Clock::now();
    return sink.write(bytes.data(), bytes.size());
  }

  // Stream chunks for the text (and log-probabilities) that became final.
  bool StreamDelta(httplib::DataSink& sink, const std::string& text) {
    if (text.empty() && logprobs.empty()) return true;
    Json chunk;
    if (chat()) {
      Json lp;
      if (fmt.logprobs) lp = LogprobsJson(model->tokenizer(), logprobs);
      chunk = ChatChunkJson(meta, {{"content", text}}, nullptr, fmt.include_usage, fmt.logprobs ? &lp : nullptr);
    } else {
      if (text.empty()) return true;
      chunk = CompletionChunkJson(meta, text, nullptr, fmt.include_usage);
    }
    logprobs.clear();
    return Write(sink, SseData(chunk));
  }

  bool StreamError(httplib::DataSink& sink, const ApiError& e) {
    return Write(sink, "data: " + ErrorBody(e) + "\n\n") && Write(sink, kSseDone);
  }

  // The error an ended request answers with (ok() when it has an answer); counts a timeout.
  ApiError FailureOf(const Result<RequestResult>& result) {
    std::string reason;
    {
      std::lock_guard<std::mutex> l(call->mu);
      reason = call->cancel_reason;
    }
    ApiError failure;
    if (!result.ok()) {
      failure = FromStatus(result.status());
      if (failure.status < 500) failure.status = 500, failure.type = "server_error";
    } else if (result->generation.finish == FinishReason::kDeadline) {
      server->metrics.CountCancelled("timeout");
      failure = {504, "timeout_error", "the answer took longer than the server's --request-timeout", "",
                 "request_timeout", 0};
    } else if (result->generation.finish == FinishReason::kCancelled) {
      failure = Unavailable(reason == "shutdown" ? "the server is shutting down; the answer was cut off"
                                                 : "the request was cancelled");
    }
    return failure;
  }

  // The answer is over: final chunk(s) or the whole body.
  bool Finish(httplib::DataSink& sink) {
    auto result = call->handle.Wait();
    const ApiError failure = FailureOf(result);
    if (result.ok()) server->metrics.ObserveResult(*result);
    if (!failure.ok()) {
      if (fmt.stream) return StreamError(sink, failure);
      return Write(sink, ErrorBody(failure));
    }
    const std::string tail = answer.Finish();
    const bool tool_calls = !answer.calls().empty();
    const char* finish = FinishReasonString(result->generation.finish, tool_calls);
    const Json usage = UsageJson(*result, fmt.dynamic_hd);
    if (fmt.stream) {
      if (!StreamDelta(sink, tail)) return false;
      if (tool_calls) {
        Json calls = ToolCallsJson(answer.calls(), /*with_index=*/true);
        for (Json& c : calls) {
          Json delta = {{"tool_calls", Json::array({c})}};
          if (!Write(sink, SseData(ChatChunkJson(meta, std::move(delta), nullptr, fmt.include_usage)))) return false;
        }
      }
      const Json last = chat() ? ChatChunkJson(meta, Json::object(), finish, fmt.include_usage)
                               : CompletionChunkJson(meta, "", finish, fmt.include_usage);
      if (!Write(sink, SseData(last))) return false;
      if (fmt.include_usage && !Write(sink, SseData(UsageChunkJson(meta, usage, chat())))) return false;
      return Write(sink, kSseDone);
    }
    if (fmt.kind == OutputFormat::kTranscription) {
      return Write(sink, fmt.text_only ? answer.content() : Dump(Json{{"text", answer.content()}, {"usage", usage}}));
    }
    if (fmt.kind == OutputFormat::kCompletion) return Write(sink, Dump(CompletionJson(meta, answer.content(), finish, usage)));
    Json lp;
    if (fmt.logprobs) lp = LogprobsJson(model->tokenizer(), result->generation.logprobs);
    return Write(sink, Dump(ChatCompletionJson(meta, answer.content(), answer.calls(), finish, usage,
                                               fmt.logprobs ? &lp : nullptr)));
  }

  // The content provider: runs until the answer is written or the client is gone.
  bool Run(httplib::DataSink& sink) {
    if (!started) {
      started = true;
      if (fmt.stream && chat() &&
          !Write(sink, SseData(ChatChunkJson(meta, {{"role", "assistant"}, {"content", ""}}, nullptr, fmt.include_usage))))
        return Abandon();
    }
    const auto ping = std::chrono::duration<double>(server->opts.sse_ping_seconds);
    for (;;) {
      std::deque<Call::Event> events;
      const bool done = call->handle.done();
      {
        std::unique_lock<std::mutex> l(call->mu);
        if (!done && call->events.empty()) call->cv.wait_for(l, std::chrono::milliseconds(50));
        events.swap(call->events);
      }
      for (Call::Event& ev : events) {
        std::string delta = answer.Push(ev.text, ev.token);
        if (ev.logprobs) logprobs.push_back(std::move(*ev.logprobs));
        if (fmt.stream && !StreamDelta(sink, delta)) return Abandon();
      }
      if (done && events.empty()) {
        finished = true;
        if (!Finish(sink)) return false;
        sink.done();
        return true;
      }
      if (!sink.is_writable()) return Abandon();
      // A plain-text body (transcription response_format text) must not get keep-alive spaces.
      if (!fmt.text_only && Clock::now() - last_write > ping) {
        if (!Write(sink, fmt.stream ? kSsePing : std::string_view(" "))) return Abandon();
      }
    }
  }

  bool Abandon() {
    call->Cancel("disconnect");
    return false;
  }
};

}  // namespace

void Server::Impl::Generate(ParsedRequest req, const OutputFormat& fmt, httplib::Response& res) {
  auto call = std::make_shared<Call>();
  call->metrics = &metrics;
  Metrics* m = &metrics;
  req.engine.on_event = [call, m](const StreamEvent& ev) {
    Call::Event e{std::string(ev.text), ev.token, std::nullopt};
    if (ev.logprobs) e.logprobs = *ev.logprobs;
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> l(call->mu);
      if (ev.token >= 0) {
        if (call->has_token) m->ObserveInterToken(std::chrono::duration<double>(now - call->last_token).count());
        call->has_token = true;
        call->last_token = now;
      }
      call->events.push_back(std::move(e));
    }
    call->cv.notify_all();
    return !call->cancel.load();
  };
  req.engine.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(opts.request_timeout_seconds));
  std::shared_ptr<const Model> mdl;
  Result<RequestHandle> handle = Status(StatusCode::kInternal, "not submitted");
  {
    std::shared_lock<std::shared_mutex> l(model_mu);
    if (!engine) return SendError(res, Unavailable("the server is shutting down", 5));
    mdl = model;
    handle = engine->Submit(std::move(req.engine));
  }
  if (!handle.ok()) return SendError(res, FromStatus(handle.status(), "messages"));
  call->handle = *handle;
  {
    std::lock_guard<std::mutex> l(calls_mu);
    calls.insert(call);
  }
  ResponseMeta meta;
  meta.id = RandomId(fmt.kind == OutputFormat::kChat ? "chatcmpl-" : "cmpl-", 32);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = opts.served_name;
  meta.fingerprint = "phi4mm-" + opts.build.version + "-" + opts.build.quant;
  auto writer = std::make_shared<Writer>(this, mdl, call, fmt, std::move(meta));
  if (!req.ignored_fields.empty()) {
    std::string list;
    for (const std::string& f : req.ignored_fields) list += (list.empty() ? "" : ",") + f;
    res.set_header("x-phi4mm-ignored-fields", list);
  }
  if (!fmt.stream) {
    // A plain answer waits up to 250 ms for the engine before its status line goes out, so a
    // request that fails at once (a tower that cannot load, a decoder error) gets its real status,
    // not a 200 whose body is an error. Not longer: the connection is not watched during the wait
    // (a client leaving is noticed once the response writer runs). A later failure can only be the
    // body's error object.
    if (call->handle.WaitFor(std::chrono::milliseconds(250))) {
      const ApiError failure = writer->FailureOf(call->handle.Wait());
      if (!failure.ok()) {
        writer->finished = true;
        EndCall(call);
        return SendError(res, failure);
      }
    }
  }
  const char* type = fmt.stream ? "text/event-stream"
                                 : (fmt.kind == OutputFormat::kTranscription && fmt.text_only ? "text/plain; charset=utf-8"
                                                                                              : "application/json");
  if (fmt.stream) res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      type, [writer](size_t, httplib::DataSink& sink) { return writer->Run(sink); },
      [this, writer](bool) {
        if (!writer->finished) writer->call->Cancel("disconnect");
        EndCall(writer->call);
      });
}

void Server::Impl::EndCall(const std::shared_ptr<Call>& call) {
  std::lock_guard<std::mutex> l(calls_mu);
  calls.erase(call);
  calls_cv.notify_all();
}

}  // namespace phi4mm::server
