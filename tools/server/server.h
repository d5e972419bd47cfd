// `phi4mm serve`'s HTTP server: an OpenAI-compatible API over one batched Engine, on the
// event-driven HTTP layer of http/http_server.h. The interface is deliberately narrow (start, hand
// over the loaded engine, drain, stop). /health answers 503 until SetEngine and again once Drain
// begins; everything else that needs the model answers 503 meanwhile. Endpoints, fields, limits
// and errors: docs/server.md.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "http/http_server.h"
#include "metrics.h"
#include "phi4mm/runtime/engine.h"
#include "request.h"

namespace phi4mm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0 = any free port (Start returns it)
  std::vector<std::string> api_keys; // empty = no authentication
  std::string served_name = "phi4mm";
  ServerLimits limits;
  int64_t max_body_bytes = int64_t{32} << 20;
  double request_timeout_seconds = 1800;
  double sse_ping_seconds = 5;       // ": ping" (or a space before a JSON body) while nothing else was sent
  bool metrics_public = false;       // /metrics without the API key
  bool webui = true;                 // the chat page at / (tools/server/webui/)
  // The HTTP layer: deadlines, connection limits, workers (http::Options; host, port and
  // max_body_bytes above take precedence over its fields).
  http::Options http;
  // Bytes of decoded media and preprocessed pixels that requests may hold before the engine has
  // encoded them; a request whose media do not fit waits (its compressed bytes only) until they do.
  int64_t media_budget_bytes = int64_t{1} << 30;
  // Large buffers (decoded images, their crops) go back to the system when freed (glibc:
  // mallopt(M_MMAP_THRESHOLD, 4 MiB), process-wide, at Start): otherwise malloc keeps what each
  // worker thread freed in its own arena, and the resident size stays at the sum of their peaks
  // whatever the media budget holds.
  bool return_freed_memory = true;
  BuildInfo build;
  std::string transcribe_prompt = "Transcribe the audio clip into text.";
  std::string translate_prompt = "Translate the audio to English.";
};

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();  // stops listening, cancels what still runs
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (port 0: a free one) and serves on a thread of its own; returns the bound port.
  Result<int> Start();
  // The model is loaded: the API opens.
  void SetEngine(std::shared_ptr<const Model> model, std::unique_ptr<Engine> engine);
  // Stops admitting (503), lets running requests finish for up to `grace`, then cancels the rest
  // (streams get an error event and [DONE]); returns when none is left.
  void Drain(std::chrono::duration<double> grace);
  // Stops listening and joins the HTTP threads.
  void Stop();
  int port() const;
  const Metrics& metrics() const;
  // Requests currently streaming or waiting for their answer.
  int64_t in_flight() const;
  // The HTTP layer's connections, refusals, evictions and timeouts.
  http::Stats http_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace phi4mm::server
