// The server's shared state and the route installers of its .cc files (not a public API). Every
// generation in flight is a Call, shared by the HTTP thread that writes its response, the engine
// thread's event callback, and Drain.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>

#include <httplib.h>

#include "api_error.h"
#include "server.h"

namespace phi4mm::server {

using Clock = std::chrono::steady_clock;

struct Call {
  struct Event {
    std::string text;
    int32_t token = -1;
    std::optional<TokenLogprobs> logprobs;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  std::atomic<bool> cancel{false};
  std::string cancel_reason;  // under mu: disconnect | shutdown
  RequestHandle handle;
  Clock::time_point last_token{};
  bool has_token = false;
  Metrics* metrics = nullptr;
  // Cancels the engine request; the first cancellation of a request still running is counted
  // under `reason` (disconnect | shutdown).
  void Cancel(const std::string& reason);
};

// How a generation's answer is written.
struct OutputFormat {
  enum Kind { kChat, kCompletion, kTranscription } kind = kChat;
  bool stream = false;
  bool include_usage = false;
  bool tools = false;
  bool logprobs = false;
  bool text_only = false;  // transcription response_format "text"
  int64_t dynamic_hd = 0;
};

struct Server::Impl {
  ServerOptions opts;
  httplib::Server http;
  std::thread listener;
  int port = 0;
  Metrics metrics;

  mutable std::shared_mutex model_mu;  // guards model/engine pointers (set once, reset at Stop)
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
  std::atomic<bool> ready{false}, draining{false};

  std::mutex calls_mu;
  std::condition_variable calls_cv;
  std::set<std::shared_ptr<Call>> calls;

  ModelFacts Facts() const;
  // Sends an error response (JSON body, Retry-After, counts rejections).
  void SendError(httplib::Response& res, const ApiError& e);
  // Submits the request and installs the response writer; errors before admission are answered
  // with their status.
  void Generate(ParsedRequest req, const OutputFormat& fmt, httplib::Response& res);
  // The call's response is over (sent, or its client gone): Drain stops waiting on it.
  void EndCall(const std::shared_ptr<Call>& call);
};

void InstallChatRoutes(Server::Impl& s);
void InstallInfoRoutes(Server::Impl& s);
void InstallAudioRoutes(Server::Impl& s);

}  // namespace phi4mm::server
