// The HTTP/1.1 server under `phi4mm serve`: one event-driven I/O thread (Boost.Asio, with
// Boost.Beast's message parser) that holds every connection, and a small pool of worker threads for
// the handlers that do real work. Nothing here knows about OpenAI or the model.
//
// What it guarantees, whatever clients do:
//   - a connection costs a socket and a small buffer, never a thread: slow or idle clients cannot
//     starve others, and cheap routes (health, metrics) are answered on the I/O thread at once;
//   - deadlines: the request line and headers within `header_timeout` of their first byte, the
//     body within `body_timeout`, an idle keep-alive connection closed after `idle_timeout`, a
//     write that makes no progress for `write_timeout` ends the connection;
//   - limits: headers (431), body size whatever its framing, chunked included (413 as soon as the
//     limit is passed, before more is read), connections in total and per client address (when
//     full, the oldest connection still waiting for a request is closed to make room; if there is
//     none, the newcomer gets 503), the bytes of all bodies being received or waiting for a worker
//     (a body waits, unread, until it fits: back-pressure through TCP), handlers waiting for a
//     worker (503 beyond), and unsent streamed bytes per response (a reader that falls that far
//     behind is dropped);
//   - the listening port is bound exclusively (no SO_REUSEPORT): a port in use is an error;
//   - a client that goes away (EOF, reset, write failure) is reported to the handler through its
//     Exchange, so the work it started can stop. A non-streamed response cannot tell a half-closed
//     client from one that left, and treats both as gone; a streamed response with a probe (an SSE
//     comment, say) sends it on EOF and keeps going if the peer is only half-closed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "body_bytes.h"
#include "phi4mm/base/status.h"

namespace phi4mm::server::http {

struct Header {
  std::string name, value;
};

struct Request {
  std::string method;   // as sent: GET, POST, ...
  std::string target;   // path and query as sent
  std::string path;     // target up to '?'
  std::string query;    // after '?', without it
  std::vector<Header> headers;
  BodyBytes body;       // de-chunked
  std::string client;   // the peer's address
  Request() = default;
  Request(Request&&) = default;
  Request& operator=(Request&&) = default;
  // Everything but the body.
  Request Head() const;
  // The first value of a header (name compared case-insensitively); empty when absent.
  std::string_view header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // values with CR or LF are dropped
  std::string body;
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int64_t max_body_bytes = int64_t{32} << 20;
  int64_t max_header_bytes = int64_t{16} << 10;
  double header_timeout = 10;  // seconds from a request's first byte to the end of its headers
  double body_timeout = 120;   // seconds for the whole body
  double idle_timeout = 60;    // seconds a keep-alive connection may wait for its next request
  double write_timeout = 60;   // seconds a write may make no progress
  int max_connections = 1024;
  int max_connections_per_client = 256;
  int64_t max_buffered_body_bytes = int64_t{256} << 20;  // all bodies received and not yet handled
  int64_t max_stream_backlog_bytes = int64_t{8} << 20;   // unsent bytes of one response
  int workers = 4;
  int max_pending = 256;  // handler calls waiting for a worker
};

struct ExchangeState;

// The pending response of one request. Copies share it; every member is safe from any thread.
// Only the first Send or StartStream counts; a response nobody answers is answered 500 when the
// last copy goes away.
class Exchange {
 public:
  explicit Exchange(std::shared_ptr<ExchangeState> s);
  // A complete response.
  void Send(Response r) const;
  // Declares that the answer will be streamed and that `probe` is a harmless piece of its body (an
  // SSE comment): when the client's side closes (EOF), the connection sends it once the stream has
  // started, to tell a half-closed client (the answer goes on) from one that left. Without a probe,
  // EOF before the answer is complete means the client is gone.
  void SetHalfCloseProbe(std::string probe) const;
  // A chunked response: status line and headers now, then Write pieces, then End. `keepalive`,
  // when not empty, is written whenever nothing else was for `keepalive_every`.
  void StartStream(int status, std::string content_type, std::vector<Header> headers = {}, std::string keepalive = "",
                   std::chrono::milliseconds keepalive_every = std::chrono::milliseconds(0)) const;
  // Queues a piece of a streamed body; false once the client is gone (nothing more is sent).
  bool Write(std::string bytes) const;
  // Ends a streamed body.
  void End() const;
  bool client_gone() const;
  // A flag that turns true when the client goes away, for loops that poll for cancellation.
  const std::atomic<bool>& gone_flag() const;
  // Runs `f` once if the client goes away before the response has been sent (at once when it
  // already has). Runs on the I/O thread or the calling one; must be quick.
  void OnClientGone(std::function<void()> f) const;

 private:
  std::shared_ptr<ExchangeState> s_;
};

using Handler = std::function<void(Request& request, Exchange exchange)>;

// What the application decides before a body is read: an answer (the request is refused; the
// connection closes if a body was announced), or nothing (route it).
using Screen = std::function<std::optional<Response>(const Request& head)>;
// The application's error body for the HTTP layer's own refusals: 400 bad request, 404, 405 (with
// the allowed method), 408 request timeout, 413 body too large, 431 headers too large, 503 busy.
using ErrorPage = std::function<Response(const Request& head, int status, std::string_view message)>;

struct Stats {
  int64_t connections = 0;            // open now
  int64_t connections_accepted = 0;   // since start
  int64_t connections_refused = 0;    // turned away at the limits
  int64_t connections_evicted = 0;    // idle or slow, closed to make room
  int64_t timeouts = 0;               // closed by a header, body, idle or write deadline
  int64_t pending = 0;                // handler calls waiting for a worker
  int64_t buffered_body_bytes = 0;    // bodies received and not yet handled
};

class Server {
 public:
  explicit Server(Options opts);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  enum class Run { kInline, kWorker };  // on the I/O thread (quick, never blocks) or a worker
  // Routes an exact path; several methods may share a path (the others get 405 with Allow).
  void Route(std::string method, std::string path, Run run, Handler h);
  // Routes every path that starts with `prefix`.
  void RoutePrefix(std::string method, std::string prefix, Run run, Handler h);
  void SetScreen(Screen s);
  void SetErrorPage(ErrorPage p);
  // Called on the I/O thread as each response's status line is queued (metrics).
  void SetOnResponse(std::function<void(const Request& head, int status)> f);
  // Headers every response carries (before its own), made afresh for each (a request id, say).
  void SetDefaultHeaders(std::function<std::vector<Header>()> f);

  // Runs `f` on a worker (the continuation of a request already taken in: not counted against
  // max_pending). Dropped when the server stops.
  void RunOnWorker(std::function<void()> f);

  // Binds (exclusively; a port in use or out of range is an error naming it) and starts serving.
  // Returns the bound port.
  Result<int> Start();
  // Stops accepting, closes every connection (their exchanges report the client gone), joins the
  // I/O thread and the workers. Idempotent.
  void Stop();
  int port() const;
  Stats stats() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// The reason phrase of a status code ("OK", "Not Found", ...).
std::string_view ReasonPhrase(int status);

}  // namespace phi4mm::server::http
