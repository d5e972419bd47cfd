// Server lifecycle (start, hand-over of the engine, drain, stop) and the cross-cutting HTTP
// handling: API-key check, 503 while loading or draining, OpenAI-format bodies for the library's
// own errors (404 -> 405 for known paths, 413), exceptions -> 500, request counting.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>

#include "response.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

const std::set<std::string>& KnownPaths() {
  static const std::set<std::string> paths = {"/v1/chat/completions", "/v1/completions",
                                              "/v1/chat/completions/input_tokens", "/v1/models",
                                              "/v1/audio/transcriptions", "/v1/audio/translations",
                                              "/health", "/v1/health", "/metrics"};
  return paths;
}

std::string EndpointLabel(const std::string& path) {
  if (KnownPaths().count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

// Constant-time comparison (the time does not depend on where the strings differ).
bool SameKey(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

bool Public(const std::string& path, const ServerOptions& o) {
  return path == "/health" || path == "/v1/health" || (path == "/metrics" && o.metrics_public);
}

}  // namespace

void Call::Cancel(const std::string& reason) {
  bool first = false;
  {
    std::lock_guard<std::mutex> l(mu);
    first = cancel_reason.empty() && !handle.done();
    if (first) cancel_reason = reason;
  }
  if (first && metrics) metrics->CountCancelled(reason);
  cancel = true;
  handle.Cancel();
  cv.notify_all();
}

ModelFacts Server::Impl::Facts() const {
  ModelFacts f;
  f.context_length = model->context_length();
  f.vocab_size = model->embedding().vocab_size();
  f.checkpoint_dynamic_hd = model->config().preprocessor.dynamic_hd;
  return f;
}

void Server::Impl::SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(ErrorBody(e), "application/json");
  if (e.retry_after_seconds > 0) res.set_header("Retry-After", std::to_string(e.retry_after_seconds));
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  if (e.status == 429) metrics.CountRejected("queue_full");
  else if (e.status == 413) metrics.CountRejected("too_large");
  else if (e.status == 503) metrics.CountRejected("unavailable");
  else if (e.status == 400) metrics.CountRejected("invalid_request");
}

namespace {

// Debian's cpp-httplib is a compiled library that listens with a backlog of 5, so a burst of
// clients connecting at once (32 in the load tests) overflowed the accept queue and the kernel
// dropped connections the clients already believed open: they got no answer. Calling listen()
// again on a listening socket sets its backlog on Linux; the library keeps its socket private,
// so it is found among this process's descriptors as the listening TCP socket bound to `port`.
// Returns whether one was found.
bool RaiseListenBacklog(int port, int backlog) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(d)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port && ::listen(fd, backlog) == 0) found = true;
  }
  closedir(d);
  return found;
}

}  // namespace

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>()) { impl_->opts = std::move(opts); }

Server::~Server() { Stop(); }

Result<int> Server::Start() {
  Impl& s = *impl_;
  const int threads = std::max(4, s.opts.http_threads);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.http.set_payload_max_length(static_cast<size_t>(s.opts.max_body_bytes));
  s.http.set_read_timeout(15, 0);
  s.http.set_write_timeout(60, 0);
  s.http.set_keep_alive_timeout(5);
  s.http.set_default_headers({{"Cache-Control", "no-store"}});

  s.http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    res.set_header("x-request-id", RandomId("req_", 20));
    // `curl -d` labels JSON bodies application/x-www-form-urlencoded, which cpp-httplib would parse
    // as a form and refuse with 413 beyond 8 KiB. Every POST body here is JSON or multipart, so the
    // label is corrected before the body is read (the Request object is not const in the library;
    // only the handler's view of it is).
    if (req.method == "POST" && req.get_header_value("Content-Type") == "application/x-www-form-urlencoded") {
      auto& headers = const_cast<httplib::Request&>(req).headers;
      auto range = headers.equal_range("Content-Type");
      for (auto it = range.first; it != range.second; ++it) it->second = "application/json";
    }
    if (!s.opts.api_keys.empty() && !Public(req.path, s.opts)) {
      const std::string auth = req.get_header_value("Authorization");
      bool ok = false;
      if (auth.rfind("Bearer ", 0) == 0) {
        const std::string key = auth.substr(7);
        for (const std::string& k : s.opts.api_keys) ok = SameKey(key, k) || ok;
      }
      if (!ok) {
        s.SendError(res, ApiError{401, "authentication_error",
                                  auth.empty() ? "missing API key: send it as Authorization: Bearer <key>"
                                               : "invalid API key",
                                  "", "invalid_api_key", 0});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const bool needs_model = req.path != "/health" && req.path != "/v1/health" && req.path != "/metrics";
    if (needs_model && KnownPaths().count(req.path) + (req.path.rfind("/v1/models/", 0) == 0) > 0) {
      if (s.draining) {
        s.SendError(res, Unavailable("the server is shutting down", 5));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!s.ready) {
        s.SendError(res, Unavailable("Loading model", 5));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  s.http.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404 && KnownPaths().count(req.path)) {
      const bool get = req.path == "/v1/models" || req.path == "/health" || req.path == "/v1/health" || req.path == "/metrics";
      res.set_header("Allow", get ? "GET" : "POST");
      s.SendError(res, ApiError{405, "invalid_request_error",
                                "method " + req.method + " is not allowed on " + req.path + "; use " + (get ? "GET" : "POST"),
                                "", "method_not_allowed", 0});
    } else if (res.status == 404) {
      s.SendError(res, ApiError{404, "not_found_error", "no such endpoint: " + req.method + " " + req.path, "",
                                "not_found", 0});
    } else if (res.status == 413) {
      s.SendError(res, ApiError{413, "invalid_request_error",
                                "the request body is larger than the server's limit of " +
                                    std::to_string(s.opts.max_body_bytes >> 20) + " MiB (--max-body-mb)",
                                "", "request_too_large", 0});
    } else {
      s.SendError(res, ApiError{res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                                "the HTTP request could not be processed (status " + std::to_string(res.status) + ")",
                                "", "", 0});
    }
  });

  s.http.set_exception_handler([&s](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    s.SendError(res, ServerError("internal error: " + what));
  });

  // Counted before the response is written (httplib runs the post-routing handler then, and the
  // logger only after the last byte is sent): a client that has its answer sees it in /metrics.
  s.http.set_post_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    s.metrics.CountRequest(EndpointLabel(req.path), res.status);
  });

  InstallChatRoutes(s);
  InstallInfoRoutes(s);
  InstallAudioRoutes(s);

  int port = s.opts.port;
  if (port == 0) {
    port = s.http.bind_to_any_port(s.opts.host);
    if (port <= 0) return InvalidArgument("cannot listen on " + s.opts.host + " (any port)");
  } else if (!s.http.bind_to_port(s.opts.host, port)) {
    return InvalidArgument("cannot listen on " + s.opts.host + ":" + std::to_string(port) +
                           " (in use, or not an address of this machine)");
  }
  s.port = port;
  RaiseListenBacklog(port, 512);
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  return port;
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
    for (const auto& c : s.calls) c->Cancel("shutdown");
    s.calls_cv.wait_for(l, std::chrono::seconds(10), [&] { return s.calls.empty(); });
  }
}

void Server::Stop() {
  Impl& s = *impl_;
  s.draining = true;
  {
    // Cancelled calls end within an engine step, so the HTTP threads writing them can be joined.
    std::lock_guard<std::mutex> l(s.calls_mu);
    for (const auto& c : s.calls) c->Cancel("shutdown");
  }
  if (s.listener.joinable()) {
    s.http.stop();
    s.listener.join();
  }
  std::unique_lock<std::shared_mutex> l(s.model_mu);
  s.ready = false;
  s.engine.reset();
}

int Server::port() const { return impl_->port; }
const Metrics& Server::metrics() const { return impl_->metrics; }

int64_t Server::in_flight() const {
  std::lock_guard<std::mutex> l(impl_->calls_mu);
  return static_cast<int64_t>(impl_->calls.size());
}

}  // namespace phi4mm::server
