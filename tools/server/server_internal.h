// The server's shared state and the route installers of its .cc files (not a public API). Every
// generation in flight is a Call, shared by the exchange that answers it, the engine thread's
// callbacks, and Drain.
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "api_error.h"
#include "http/byte_budget.h"
#include "http/http_server.h"
#include "media_admission.h"
#include "server.h"

namespace phi4mm::server {

using Clock = std::chrono::steady_clock;

struct Call {
  std::mutex mu;
  std::string cancel_reason;  // under mu: disconnect | shutdown
  std::vector<RequestHandle> handles;  // under mu: one per choice, added as Submit returns them
  bool cancel_requested = false;  // under mu: Cancel before the handle existed
  bool ended = false;             // under mu: the engine finished with it
  Metrics* metrics = nullptr;
  // Cancels the engine requests; the first cancellation of a request still running is counted
  // under `reason` (disconnect | shutdown).
  void Cancel(const std::string& reason);
  // Cancels the engine requests submitted so far, without a reason (the server gave up on them).
  void CancelHandles();
};

// How a generation's answer is written.
struct OutputFormat {
  enum Kind { kChat, kCompletion, kTranscription } kind = kChat;
  bool stream = false;
  bool include_usage = false;
  bool tools = false;
  bool tool_grammar = false;  // the calls follow the tool-call grammar: streamed as deltas
  bool logprobs = false;
  bool text_only = false;  // transcription response_format "text"
  int64_t dynamic_hd = 0;
};

struct Server::Impl {
  explicit Impl(ServerOptions o);
  ServerOptions opts;
  http::Server http;
  Metrics metrics;
  // Decoded media and preprocessed pixels held for requests not yet encoded (media_budget.h).
  http::ByteBudget media_budget;

  mutable std::shared_mutex model_mu;  // guards model/engine pointers (set once, reset at Stop)
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
  std::atomic<bool> ready{false}, draining{false};

  std::mutex calls_mu;
  std::condition_variable calls_cv;
  std::set<std::shared_ptr<Call>> calls;

  ModelFacts Facts() const;
  // An error response (JSON body, Retry-After); counts the rejection.
  http::Response ErrorResponse(const ApiError& e);
  void SendError(const http::Exchange& ex, const ApiError& e);
  // Submits the request and answers through `ex`: errors before admission with their status, then
  // the streamed or complete answer.
  // `media_hold`, when given, is what the request's media hold of the media budget: after Submit
  // it shrinks to `held_bytes`, and the engine lets go of it once the media are encoded.
  void Generate(ParsedRequest req, const OutputFormat& fmt, const http::Exchange& ex,
                std::shared_ptr<http::BudgetHold> media_hold = nullptr, int64_t held_bytes = 0);
  // Retry-After for a request the engine's queue refused: the queue ahead at the recent pace.
  int RetryAfterSeconds() const;
  // The call's response is over (sent, or its client gone): Drain stops waiting on it.
  void EndCall(const std::shared_ptr<Call>& call);
  // Admission before work (admission.cc): plans the request's media from their headers, refuses a
  // prompt that cannot fit the context, takes the media budget for decoding them (waiting when it
  // does not fit now), decodes them, then calls `next` on a worker with the request, the budget's
  // hold, and the bytes that stay held until the engine has encoded the media. Errors are
  // answered here. For counting only (`counting`): images are not decoded (their size gives their
  // tokens) and a prompt over the context is not refused.
  using AdmittedNext = std::function<void(ParsedRequest, std::shared_ptr<http::BudgetHold>, int64_t held_bytes)>;
  void AdmitMedia(ParsedRequest p, const ModelFacts& facts, const http::Exchange& ex, bool counting,
                  AdmittedNext next);
};

// Parses a chat (or completions) body into `out`; false, with the error sent, when the body or the
// request is bad. `answer_streams`: the answer is an SSE stream when the body says "stream": true
// (the connection then probes a half-closed client with SSE comments); false for routes that
// answer JSON whatever the body says (render).
bool ParseApiRequest(Server::Impl& s, http::Request& req, const http::Exchange& ex, bool chat, ParsedRequest* out,
                     ModelFacts* facts_out = nullptr, bool answer_streams = true);

void InstallChatRoutes(Server::Impl& s);
void InstallRenderRoutes(Server::Impl& s);
void InstallInfoRoutes(Server::Impl& s);
void InstallAudioRoutes(Server::Impl& s);
void InstallWebUiRoutes(Server::Impl& s);
// The chat page's paths: / and /ui/... (public: the page asks for the API key itself).
bool WebUiPath(const std::string& path);

}  // namespace phi4mm::server
