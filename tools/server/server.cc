// Server lifecycle (start, hand-over of the engine, drain, stop) and the cross-cutting HTTP
// handling: the API-key check and the 503 while loading or draining (the HTTP layer's screen, run
// before a body is read), OpenAI-format bodies for the HTTP layer's own refusals (404, 405, 408,
// 413, 431, 503), and request counting.
#if __has_include(<malloc.h>)
#include <malloc.h>
#endif

#include <algorithm>

#include "response.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

const std::set<std::string>& KnownPaths() {
  static const std::set<std::string> paths = {"/v1/chat/completions", "/v1/completions",
                                              "/v1/chat/completions/input_tokens", "/v1/chat/completions/render",
                                              "/v1/completions/render", "/v1/models",
                                              "/v1/audio/transcriptions", "/v1/audio/translations",
                                              "/health", "/v1/health", "/metrics"};
  return paths;
}

std::string EndpointLabel(const std::string& path) {
  if (KnownPaths().count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (WebUiPath(path)) return "webui";
  return "other";
}

// Constant-time comparison (the time does not depend on where the strings differ).
bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

bool Public(const std::string& path, const ServerOptions& o) {
  return path == "/health" || path == "/v1/health" || (path == "/metrics" && o.metrics_public) ||
         (o.webui && WebUiPath(path));
}

http::Options HttpOptions(const ServerOptions& o) {
  http::Options h = o.http;
  h.host = o.host;
  h.port = o.port;
  h.max_body_bytes = o.max_body_bytes;
  h.max_buffered_body_bytes = std::max(h.max_buffered_body_bytes, o.max_body_bytes);
  return h;
}

}  // namespace

void Call::Cancel(const std::string& reason) {
  bool first = false;
  {
    std::lock_guard<std::mutex> l(mu);
    if (ended) return;
    first = cancel_reason.empty();
    if (first) cancel_reason = reason;
    cancel_requested = true;
  }
  if (first && metrics) metrics->CountCancelled(reason);
  CancelHandles();
}

void Call::CancelHandles() {
  std::vector<RequestHandle> hs;
  {
    std::lock_guard<std::mutex> l(mu);
    hs = handles;
  }
  for (RequestHandle& h : hs) h.Cancel();
}

Server::Impl::Impl(ServerOptions o) : opts(std::move(o)), http(HttpOptions(opts)), media_budget(opts.media_budget_bytes) {}

ModelFacts Server::Impl::Facts() const { return FactsOf(*model); }

http::Response Server::Impl::ErrorResponse(const ApiError& e) {
  http::Response r;
  r.status = e.status;
  r.body = ErrorBody(e);
  if (e.retry_after_seconds > 0) r.headers.push_back({"Retry-After", std::to_string(e.retry_after_seconds)});
  if (e.status == 401) r.headers.push_back({"WWW-Authenticate", "Bearer"});
  if (e.status == 429) metrics.CountRejected("queue_full");
  else if (e.status == 413) metrics.CountRejected("too_large");
  else if (e.status == 503) metrics.CountRejected("unavailable");
  else if (e.status == 400) metrics.CountRejected("invalid_request");
  else if (e.status == 408) metrics.CountRejected("timeout");
  else if (e.status == 431) metrics.CountRejected("too_large");
  return r;
}

void Server::Impl::SendError(const http::Exchange& ex, const ApiError& e) { ex.Send(ErrorResponse(e)); }

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

Server::~Server() { Stop(); }

Result<int> Server::Start() {
  Impl& s = *impl_;
#ifdef M_MMAP_THRESHOLD
  if (s.opts.return_freed_memory) mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
  s.http.SetScreen([&s](const http::Request& req) -> std::optional<http::Response> {
    if (!s.opts.api_keys.empty() && !Public(req.path, s.opts)) {
      const std::string_view auth = req.header("authorization");
      bool ok = false;
      if (auth.substr(0, 7) == "Bearer ") {
        const std::string_view key = auth.substr(7);
        for (const std::string& k : s.opts.api_keys) ok = SameKey(key, k) || ok;
      }
      if (!ok)
        return s.ErrorResponse(ApiError{401, "authentication_error",
                                        auth.empty() ? "missing API key: send it as Authorization: Bearer <key>"
                                                     : "invalid API key",
                                        "", "invalid_api_key", 0});
    }
    const bool needs_model = req.path != "/health" && req.path != "/v1/health" && req.path != "/metrics";
    if (needs_model && (KnownPaths().count(req.path) > 0 || req.path.rfind("/v1/models/", 0) == 0)) {
      if (s.draining) return s.ErrorResponse(Unavailable("the server is shutting down", 5));
      if (!s.ready) return s.ErrorResponse(Unavailable("Loading model", 5));
    }
    return std::nullopt;
  });

  s.http.SetErrorPage([&s](const http::Request&, int status, std::string_view message) {
    std::string code;
    std::string type = status >= 500 ? "server_error" : "invalid_request_error";
    int retry = 0;
    switch (status) {
      case 404: code = "not_found", type = "not_found_error"; break;
      case 405: code = "method_not_allowed"; break;
      case 408: code = "request_timeout", type = "timeout_error"; break;
      case 413: code = "request_too_large"; break;
      case 431: code = "headers_too_large"; break;
      case 503: code = "server_busy", type = "unavailable_error", retry = 1; break;
      case 500: code = "internal_error"; break;
      default: code = "bad_request"; break;
    }
    std::string text(message);
    if (status == 413) text += " (--max-body-mb)";
    return s.ErrorResponse(ApiError{status, type, text, "", code, retry});
  });

  s.http.SetDefaultHeaders([] {
    return std::vector<http::Header>{{"x-request-id", RandomId("req_", 20)}, {"Cache-Control", "no-store"}};
  });

  s.http.SetOnResponse([&s](const http::Request& req, int status) {
    s.metrics.CountRequest(EndpointLabel(req.path), status);
  });

  InstallChatRoutes(s);
  InstallInfoRoutes(s);
  InstallAudioRoutes(s);
  InstallRenderRoutes(s);
  InstallWebUiRoutes(s);
  return s.http.Start();
}

void Server::SetEngine(std::shared_ptr<const Model> model, std::unique_ptr<Engine> engine) {
  {
    std::unique_lock<std::shared_mutex> l(impl_->model_mu);
    impl_->model = std::move(model);
    impl_->engine = std::move(engine);
  }
  impl_->ready = true;
}

void Server::Drain(std::chrono::duration<double> grace) {
  Impl& s = *impl_;
  s.draining = true;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace);
  std::unique_lock<std::mutex> l(s.calls_mu);
  if (!s.calls_cv.wait_until(l, deadline, [&] { return s.calls.empty(); })) {
    const std::set<std::shared_ptr<Call>> running = s.calls;
    l.unlock();
    for (const auto& c : running) c->Cancel("shutdown");
    l.lock();
    s.calls_cv.wait_for(l, std::chrono::seconds(10), [&] { return s.calls.empty(); });
  }
}

void Server::Stop() {
  Impl& s = *impl_;
  s.draining = true;
  {
    std::set<std::shared_ptr<Call>> running;
    {
      std::lock_guard<std::mutex> l(s.calls_mu);
      running = s.calls;
    }
    for (const auto& c : running) c->Cancel("shutdown");
  }
  // The engine first: its thread ends every request (their answers are posted to the HTTP layer,
  // which then closes the connections).
  {
    std::unique_lock<std::shared_mutex> l(s.model_mu);
    s.ready = false;
    s.engine.reset();
  }
  s.http.Stop();
}

int Server::port() const { return impl_->http.port(); }
const Metrics& Server::metrics() const { return impl_->metrics; }

http::Stats Server::http_stats() const { return impl_->http.stats(); }

int64_t Server::in_flight() const {
  std::lock_guard<std::mutex> l(impl_->calls_mu);
  return static_cast<int64_t>(impl_->calls.size());
}

}  // namespace phi4mm::server
