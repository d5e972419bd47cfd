// Answer streams between the engine thread and Python threads (py_stream.h).
#include "py_stream.h"

#include <optional>

#include "server/response.h"

namespace phi4mm::python {

struct Stream::Shared {
  struct Event {
    std::string text;
    int32_t token = -1;
    std::optional<TokenLogprobs> logprobs;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Event> events;
  bool done = false;
  bool cancel = false;
  Status status;
  RequestResult result;
};

Result<std::shared_ptr<Stream>> Stream::Submit(std::shared_ptr<Core> core, server::ParsedRequest request, bool chat) {
  if (request.n != 1)
    return InvalidArgument(
        "n must be 1 here: call the model once per choice (each with its own seed), from as many "
        "threads as you like; the engine batches them");
  std::shared_ptr<Stream> s(new Stream());
  s->core_ = std::move(core);
  s->shared_ = std::make_shared<Shared>();
  s->chat_ = chat;
  s->logprobs_ = request.logprobs;
  s->dynamic_hd_ = request.dynamic_hd;
  if (chat)
    s->answer_ = std::make_unique<server::AnswerBuilder>(
        request.tools, request.output.kind == server::OutputRequest::Kind::kToolCalls);
  EngineRequest& er = request.engine;
  std::shared_ptr<Shared> sh = s->shared_;
  er.on_event = [sh](const StreamEvent& ev) {
    std::lock_guard<std::mutex> l(sh->mu);
    Shared::Event e{std::string(ev.text), ev.token, std::nullopt};
    if (ev.logprobs != nullptr) e.logprobs = *ev.logprobs;
    sh->events.push_back(std::move(e));
    sh->cv.notify_all();
    return !sh->cancel;
  };
  er.on_done = [sh](const Status& st, const RequestResult& r) {
    std::lock_guard<std::mutex> l(sh->mu);
    sh->done = true;
    sh->status = st;
    sh->result = r;
    sh->cv.notify_all();
  };
  PHI4MM_ASSIGN_OR_RETURN(s->handle_, s->core_->engine->Submit(std::move(er)));
  return s;
}

Stream::~Stream() {
  if (!finished_ && shared_) {
    {
      std::lock_guard<std::mutex> l(shared_->mu);
      shared_->cancel = true;
    }
    handle_.Cancel();
  }
}

bool Stream::Take(Piece* out) {
  out->text.clear();
  out->tokens.clear();
  if (finished_) return false;
  std::vector<Shared::Event> events;
  bool done = false;
  {
    std::unique_lock<std::mutex> l(shared_->mu);
    shared_->cv.wait(l, [&] { return !shared_->events.empty() || shared_->done; });
    events.swap(shared_->events);
    done = shared_->done;
    if (done) {
      status_ = shared_->status;
      result_ = std::move(shared_->result);
    }
  }
  for (Shared::Event& e : events) {
    if (e.token >= 0) out->tokens.push_back(e.token);
    out->text += chat_ ? answer_->Push(e.text, e.token) : e.text;
    if (e.logprobs) logprobs_seen_.push_back(std::move(*e.logprobs));
  }
  if (done) {
    if (chat_) out->text += answer_->Finish();
    finished_ = true;
  }
  return !events.empty() || !out->text.empty();
}

void Stream::Close() {
  if (finished_) return;
  {
    std::lock_guard<std::mutex> l(shared_->mu);
    shared_->cancel = true;
  }
  handle_.Cancel();
  Piece ignored;
  while (Take(&ignored)) {
  }
}

std::string Stream::ResultJson() const {
  const GenerateResult& g = result_.generation;
  const std::vector<server::ToolCall> no_calls;
  const std::vector<server::ToolCall>& calls = chat_ ? answer_->calls() : no_calls;
  const char* finish = g.finish == FinishReason::kCancelled  ? "cancelled"
                       : g.finish == FinishReason::kDeadline ? "deadline"
                                                             : server::FinishReasonString(g.finish, !calls.empty());
  server::Json j;
  j["text"] = chat_ ? answer_->content() : g.text;
  j["tokens"] = g.tokens;
  j["finish_reason"] = finish;
  j["usage"] = server::UsageJson(result_, dynamic_hd_);
  j["tool_calls"] = calls.empty() ? server::Json::array() : server::ToolCallsJson(calls, false);
  if (logprobs_) j["logprobs"] = server::LogprobsJson(core_->model->tokenizer(), logprobs_seen_);
  j["cached_prompt_tokens"] = result_.cached_prompt_tokens;
  j["time_to_first_token"] = result_.time_to_first_token;
  j["total_seconds"] = result_.total_seconds;
  return server::Dump(j);
}

}  // namespace phi4mm::python
