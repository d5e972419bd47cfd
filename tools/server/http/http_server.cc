// The HTTP/1.1 server (http_server.h). One I/O thread owns every connection: a connection reads
// into its buffer continuously and feeds Beast's request parser by hand (put), so the same read
// that parses a request also notices a client leaving while its answer is computed. Everything a
// handler or an engine thread asks of a connection (send, stream a piece, end) is posted to the
// I/O thread; the flags a handler polls (client gone, unsent bytes) are atomics in the exchange's
// shared state.
#include "http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/core/buffers_range.hpp>

#include "byte_budget.h"

namespace phi4mm::server::http {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr int64_t kBodyGrain = int64_t{1} << 20;  // body budget taken in steps of this
// Bytes a client may send ahead (pipelining) while its current request is answered; beyond, the
// connection stops reading until the answer is out.
constexpr size_t kMaxReadAhead = 64 << 10;
// After an EOF on a streamed answer: the second probe, whose failure shows the peer is gone.
constexpr auto kProbeDelay = std::chrono::milliseconds(200);
// An EOF while a handler runs: how long it has to declare a stream (and a probe) before the client
// counts as gone.
constexpr auto kHalfCloseGrace = std::chrono::milliseconds(250);
// Stop: how long answers already being written get to reach their clients.
constexpr auto kStopFlush = std::chrono::seconds(3);
// How long a refused request's remaining bytes are read and dropped before the socket closes.
constexpr double kLingerSeconds = 2;

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] + 32) : a[i];
    const char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] + 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

bool SafeHeader(const Header& h) {
  auto bad = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
  return !h.name.empty() && std::none_of(h.name.begin(), h.name.end(), bad) &&
         std::none_of(h.value.begin(), h.value.end(), bad) &&
         h.name.find(':') == std::string::npos;
}

std::string HttpDate() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

// The status line and headers of a response; `length` < 0: chunked.
std::string Head(int status, const std::string& content_type, const std::vector<Header>& headers, int64_t length,
                 bool close) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + std::string(ReasonPhrase(status)) + "\r\n";
  h += "Date: " + HttpDate() + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  for (const Header& x : headers) {
    if (!SafeHeader(x) || IEquals(x.name, "content-length") || IEquals(x.name, "transfer-encoding") ||
        IEquals(x.name, "connection"))
      continue;
    h += x.name + ": " + x.value + "\r\n";
  }
  if (length >= 0) h += "Content-Length: " + std::to_string(length) + "\r\n";
  else h += "Transfer-Encoding: chunked\r\n";
  if (close) h += "Connection: close\r\n";
  h += "\r\n";
  return h;
}

std::string Chunk(std::string_view data) {
  char len[24];
  const int n = std::snprintf(len, sizeof len, "%zx\r\n", data.size());
  std::string c(len, static_cast<size_t>(n));
  c.append(data);
  c.append("\r\n");
  return c;
}

// Beast's Body for a request parser that receives into BodyBytes (a Content-Length reserves the
// address space at once; pages become resident as bytes arrive).
struct MappedBody {
  using value_type = BodyBytes;
  class reader {
   public:
    template <bool isRequest, class Fields>
    explicit reader(bhttp::header<isRequest, Fields>&, value_type& b) : body_(b) {}
    void init(const boost::optional<std::uint64_t>& length, boost::system::error_code& ec) {
      ec = {};
      if (length && !body_.Reserve(static_cast<size_t>(*length))) ec = bhttp::error::buffer_overflow;
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
      ec = {};
      size_t n = 0;
      for (const auto b : boost::beast::buffers_range_ref(buffers)) {
        if (!body_.Append(static_cast<const char*>(b.data()), b.size())) {
          ec = bhttp::error::buffer_overflow;
          return n;
        }
        n += b.size();
      }
      return n;
    }
    void finish(boost::system::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string_view Request::header(std::string_view name) const {
  for (const Header& h : headers)
    if (IEquals(h.name, name)) return h.value;
  return {};
}

Request Request::Head() const {
  Request r;
  r.method = method;
  r.target = target;
  r.path = path;
  r.query = query;
  r.headers = headers;
  r.client = client;
  return r;
}

bool Request::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const Header& h) { return IEquals(h.name, name); });
}

// ---- shared state ---------------------------------------------------------------------------

struct Conn;

// What a connection and the exchanges of its current request share (any thread).
struct ExchangeSignals {
  std::atomic<bool> gone{false};
  std::atomic<int64_t> backlog{0};  // streamed bytes posted and not yet written
  std::mutex mu;
  std::vector<std::function<void()>> on_gone;
  bool finished = false;  // the response is complete: leaving no longer counts as gone
  std::string probe;      // Exchange::SetHalfCloseProbe
  // Marks the client gone; returns the callbacks to run (none once finished or already gone).
  std::vector<std::function<void()>> MarkGone() {
    std::lock_guard<std::mutex> l(mu);
    if (finished || gone.exchange(true)) return {};
    return std::move(on_gone);
  }
};

struct RouteEntry {
  std::string method, path;
  bool prefix = false;
  Server::Run run = Server::Run::kInline;
  Handler handler;
};

struct Server::Impl {
  explicit Impl(Options o) : opts(std::move(o)), acceptor(io), accept_retry(io), bodies(opts.max_buffered_body_bytes) {}
  std::weak_ptr<Impl> self;  // set by Server: exchanges keep the Impl (and its io_context) alive
  Options opts;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  std::thread io_thread;
  int port = 0;
  bool started = false;
  bool stopping = false;  // I/O thread: Stop began; connections close once their answer is out
  std::atomic<bool> stopped{false};

  std::vector<RouteEntry> routes;
  Screen screen;
  ErrorPage error_page;
  std::function<void(const Request&, int)> on_response;
  std::function<std::vector<Header>()> default_headers;
  // The default headers followed by `own`.
  std::vector<Header> WithDefaults(const std::vector<Header>& own) const {
    std::vector<Header> all = default_headers ? default_headers() : std::vector<Header>{};
    all.insert(all.end(), own.begin(), own.end());
    return all;
  }

  ByteBudget bodies;
  // I/O thread only.
  std::map<uint64_t, std::shared_ptr<Conn>> conns;
  std::map<std::string, int> per_client;
  uint64_t next_conn = 1;

  // Counters (I/O thread writes, stats() reads).
  std::atomic<int64_t> open{0}, accepted{0}, refused{0}, evicted{0}, timeouts{0};

  // Workers.
  std::mutex work_mu;
  std::condition_variable work_cv;
  std::deque<std::function<void()>> work;
  std::vector<std::thread> workers;
  bool work_stop = false;

  void Accept();
  void OnAccept(tcp::socket sock);
  bool MakeRoom(const std::string& client);
  // Queues a handler call for a worker; false when the queue is full.
  bool Enqueue(std::function<void()> f);
  void WorkerLoop();
  Response ErrorResponse(const Request& head, int status, std::string_view message) const;
};

// One exchange's handle, held by the Exchange copies only: when the last goes away unanswered, the
// request gets a 500.
struct ExchangeState {
  std::shared_ptr<Server::Impl> impl;
  std::weak_ptr<Conn> conn;
  uint64_t seq = 0;
  std::shared_ptr<ExchangeSignals> sig;
  std::atomic<bool> answered{false};
  int64_t max_backlog = 0;
  ~ExchangeState();
};

// ---- one connection (I/O thread only) -------------------------------------------------------

struct Conn : std::enable_shared_from_this<Conn> {
  // kLinger: an answer was sent before the request was read whole; what the client still sends
  // is read and dropped for a moment, so that it sees the answer instead of a reset.
  enum class State { kIdle, kHeader, kBody, kBodyWait, kHandling, kResponding, kLinger, kClosed };

  Conn(Server::Impl& s, tcp::socket sock, std::string client, uint64_t id)
      : s(s), sock(std::move(sock)), client(std::move(client)), id(id), read_timer(s.io), write_timer(s.io),
        beat_timer(s.io) {}

  Server::Impl& s;
  tcp::socket sock;
  std::string client;
  uint64_t id;
  SteadyClock::time_point since = SteadyClock::now();  // when the connection began waiting for a request
  State state = State::kIdle;
  boost::beast::flat_buffer in;
  std::optional<bhttp::request_parser<MappedBody>> parser;
  asio::steady_timer read_timer, write_timer, beat_timer;
  bool reading = false, writing = false, peer_eof = false;
  std::deque<std::pair<std::string, int64_t>> out;  // bytes, and how many of them count as streamed backlog

  // The request being received or answered.
  uint64_t seq = 0;
  Request head;
  bool keep_alive = true, close_after = false, response_complete = false, linger = false;
  BudgetHold body_hold;
  ByteBudget::Ticket body_ticket = 0;
  std::shared_ptr<ExchangeSignals> sig;
  // A streamed answer.
  bool streaming = false, probe_sent = false;
  std::string beat;
  std::chrono::milliseconds beat_every{0};
  SteadyClock::time_point last_write = SteadyClock::now();

  void Begin() {
    BeginRequest();
    Read();
  }

  void BeginRequest() {
    state = State::kIdle;
    since = SteadyClock::now();
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(s.opts.max_header_bytes));
    parser->body_limit(static_cast<std::uint64_t>(s.opts.max_body_bytes));
    head = Request{};
    head.client = client;
    keep_alive = true;
    close_after = response_complete = streaming = probe_sent = linger = false;
    beat.clear();
    sig.reset();
    ++seq;
    Arm(read_timer, s.opts.idle_timeout);
    if (in.size() > 0) OnBytes();
  }

  void Arm(asio::steady_timer& t, double seconds) {
    t.expires_after(std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds)));
    std::weak_ptr<Conn> w = weak_from_this();
    asio::steady_timer* tp = &t;
    t.async_wait([w, tp](const boost::system::error_code& ec) {
      if (ec) return;
      if (auto c = w.lock()) c->OnTimer(tp);
    });
  }

  bool ReadingRequest() const { return state == State::kIdle || state == State::kHeader || state == State::kBody; }

  void Read() {
    if (reading || state == State::kClosed || state == State::kBodyWait) return;
    if (peer_eof && state != State::kLinger) return;
    if (!ReadingRequest() && state != State::kLinger && in.size() >= kMaxReadAhead) return;
    reading = true;
    auto self = shared_from_this();
    sock.async_read_some(in.prepare(kReadChunk), [self](const boost::system::error_code& ec, size_t n) {
      self->reading = false;
      if (self->state == State::kClosed) return;
      if (self->state == State::kLinger) {
        if (ec) return self->Close(false);
        self->in.consume(self->in.size() + n);
        return self->Read();
      }
      if (ec) return self->OnPeerClosed(ec == asio::error::eof);
      self->in.commit(n);
      self->OnBytes();
      self->Read();
    });
  }

  void OnBytes() {
    if (state == State::kIdle && in.size() > 0) {
      state = State::kHeader;
      Arm(read_timer, s.opts.header_timeout);
    }
    if (state == State::kHeader || state == State::kBody) Parse();
  }

  void Parse() {
    while (state == State::kHeader || state == State::kBody) {
      if (in.size() == 0) return;
      boost::system::error_code ec;
      const size_t used = parser->put(in.data(), ec);
      in.consume(used);
      if (ec == bhttp::error::need_more) {
        // Headers are parsed only whole: the buffer holds them until they are.
        if (state == State::kHeader && in.size() > static_cast<size_t>(s.opts.max_header_bytes))
          return Refuse(431, "the request headers are larger than the server's limit of " +
                                 std::to_string(s.opts.max_header_bytes >> 10) + " KiB");
        return;
      }
      if (ec) {
        if (ec == bhttp::error::header_limit)
          return Refuse(431, "the request headers are larger than the server's limit of " +
                                 std::to_string(s.opts.max_header_bytes >> 10) + " KiB");
        if (ec == bhttp::error::body_limit) return RefuseTooLarge();
        return Refuse(400, "malformed HTTP request: " + ec.message());
      }
      if (state == State::kHeader && parser->is_header_done()) {
        if (!OnHeader()) return;
      }
      if (state == State::kBody && !TakeBodyBudget()) return;
      if (parser->is_done()) return OnComplete();
      if (used == 0) return;
    }
  }

  void RefuseTooLarge() {
    Refuse(413, "the request body is larger than the server's limit of " +
                    std::to_string(s.opts.max_body_bytes >> 20) + " MiB");
  }

  // Headers complete: route, screen, announce. False when the request was answered already.
  bool OnHeader() {
    const auto& msg = parser->get();
    head.method = std::string(msg.method_string());
    head.target = std::string(msg.target());
    const size_t q = head.target.find('?');
    head.path = head.target.substr(0, q);
    head.query = q == std::string::npos ? "" : head.target.substr(q + 1);
    for (const auto& f : msg) head.headers.push_back({std::string(f.name_string()), std::string(f.value())});
    keep_alive = parser->keep_alive();
    const bool body = parser->chunked() || parser->content_length().value_or(0) > 0;
    if (parser->content_length() && *parser->content_length() > static_cast<std::uint64_t>(s.opts.max_body_bytes)) {
      RefuseTooLarge();
      return false;
    }
    const RouteEntry* route = nullptr;
    std::string allowed;
    for (const RouteEntry& r : s.routes) {
      const bool match = r.prefix ? head.path.rfind(r.path, 0) == 0 : head.path == r.path;
      if (!match) continue;
      if (r.method == head.method) {
        route = &r;
        break;
      }
      if (allowed.find(r.method) == std::string::npos) allowed += (allowed.empty() ? "" : ", ") + r.method;
    }
    if (s.screen) {
      if (std::optional<Response> r = s.screen(head)) {
        if (body) close_after = true;
        SendNow(std::move(*r));
        return false;
      }
    }
    if (route == nullptr) {
      if (!allowed.empty()) {
        Response r = s.ErrorResponse(head, 405, "method " + head.method + " is not allowed on " + head.path +
                                                    "; use " + allowed);
        r.headers.push_back({"Allow", allowed});
        if (body) close_after = true;
        SendNow(std::move(r));
      } else {
        if (body) close_after = true;
        SendNow(s.ErrorResponse(head, 404, "no such endpoint: " + head.method + " " + head.path));
      }
      return false;
    }
    if (body && IEquals(head.header("expect"), "100-continue")) Queue("HTTP/1.1 100 Continue\r\n\r\n");
    if (body) {
      state = State::kBody;
      Arm(read_timer, s.opts.body_timeout);
    }
    return true;
  }

  // Keeps the body's bytes within what the body budget granted; false (reading paused) while a
  // grant is awaited.
  bool TakeBodyBudget() {
    const int64_t have = static_cast<int64_t>(parser->get().body().size());
    if (have <= body_hold.bytes()) return true;
    // In steps of kBodyGrain, never past the whole budget (a body fits it: Start checks that).
    const int64_t need = have - body_hold.bytes();
    const int64_t step = std::max(need, std::min((need + kBodyGrain - 1) / kBodyGrain * kBodyGrain,
                                                 s.bodies.limit() - body_hold.bytes()));
    if (s.bodies.TryTake(step)) {
      AddHold(step);
      return true;
    }
    std::weak_ptr<Conn> w = weak_from_this();
    Server::Impl* impl = &s;
    const uint64_t my_seq = seq;
    ByteBudget::Ticket t = 0;
    const auto outcome = s.bodies.Take(step, [impl, w, step, my_seq] {
      asio::post(impl->io, [impl, w, step, my_seq] {
        auto c = w.lock();
        if (!c || c->seq != my_seq || c->state != State::kBodyWait) {
          impl->bodies.Give(step);
          return;
        }
        c->body_ticket = 0;
        c->AddHold(step);
        c->state = State::kBody;
        c->Arm(c->read_timer, impl->opts.body_timeout);
        c->Parse();
        c->Read();
      });
    }, &t);
    if (outcome == ByteBudget::Outcome::kTaken) {
      AddHold(step);
      return true;
    }
    if (outcome == ByteBudget::Outcome::kTooLarge) {
      RefuseTooLarge();
      return false;
    }
    body_ticket = t;
    state = State::kBodyWait;
    Arm(read_timer, s.opts.body_timeout);
    return false;
  }

  void AddHold(int64_t bytes) {
    if (body_hold.bytes() == 0) body_hold = BudgetHold(&s.bodies, bytes);
    else body_hold.Add(bytes);
  }

  void OnComplete() {
    read_timer.cancel();
    state = State::kHandling;
    Request req = head.Head();  // `head` stays for the response's bookkeeping; the body goes to the handler
    req.body = std::move(parser->get().body());
    parser.reset();
    DispatchRequest(std::move(req));
    Read();  // watches for the client leaving (and keeps what it sends ahead)
  }

  void Queue(std::string bytes, int64_t backlog = 0) {
    out.emplace_back(std::move(bytes), backlog);
    if (!writing) Write();
  }

  void Write() {
    if (out.empty() || state == State::kClosed) return;
    writing = true;
    Arm(write_timer, s.opts.write_timeout);
    auto self = shared_from_this();
    asio::async_write(sock, asio::buffer(out.front().first), [self](const boost::system::error_code& ec, size_t) {
      self->writing = false;
      self->write_timer.cancel();
      if (self->state == State::kClosed) return;
      if (ec) return self->Gone();
      self->last_write = SteadyClock::now();
      if (self->sig) self->sig->backlog -= self->out.front().second;
      self->out.pop_front();
      if (!self->out.empty()) return self->Write();
      if (self->response_complete) self->AfterResponse();
    });
  }

  // A complete response for the current request, written now (I/O thread).
  void SendNow(Response r) {
    if (state == State::kClosed || response_complete) return;
    if (sig) {
      std::lock_guard<std::mutex> l(sig->mu);
      sig->finished = true;
    }
    linger = ReadingRequest() || state == State::kBodyWait;  // the rest of the request was not read
    const bool close = close_after || !keep_alive || peer_eof || linger;
    close_after = close;
    response_complete = true;
    state = State::kResponding;
    read_timer.cancel();
    if (s.on_response) s.on_response(head, r.status);
    std::string bytes = Head(r.status, r.content_type, s.WithDefaults(r.headers), static_cast<int64_t>(r.body.size()), close);
    bytes += r.body;
    Queue(std::move(bytes));
  }

  void Refuse(int status, const std::string& message) {
    close_after = true;
    if (head.method.empty()) head.method = "?";
    SendNow(s.ErrorResponse(head, status, message));
  }

  void StartStream(int status, const std::string& type, const std::vector<Header>& headers, std::string b,
                   std::chrono::milliseconds every) {
    if (state != State::kHandling) return;
    state = State::kResponding;
    streaming = true;
    beat = std::move(b);
    beat_every = every;
    if (s.on_response) s.on_response(head, status);
    Queue(Head(status, type, s.WithDefaults(headers), -1, !keep_alive));
    if (!beat.empty() && beat_every.count() > 0) Beat();
    if (peer_eof) Probe();
  }

  void Beat() {
    beat_timer.expires_after(beat_every);
    std::weak_ptr<Conn> w = weak_from_this();
    beat_timer.async_wait([w](const boost::system::error_code& ec) {
      if (ec) return;
      auto c = w.lock();
      if (!c || c->state != State::kResponding || c->response_complete) return;
      if (c->out.empty() && SteadyClock::now() - c->last_write >= c->beat_every) c->Queue(Chunk(c->beat));
      c->Beat();
    });
  }

  void StreamPiece(std::string bytes) {
    if (state != State::kResponding || !streaming || response_complete) return;
    const int64_t n = static_cast<int64_t>(bytes.size());
    if (n == 0) return;
    Queue(Chunk(bytes), n);
  }

  void StreamEnd() {
    if (state != State::kResponding || !streaming || response_complete) return;
    {
      std::lock_guard<std::mutex> l(sig->mu);
      sig->finished = true;
    }
    response_complete = true;
    beat_timer.cancel();
    Queue("0\r\n\r\n");
  }

  void AfterResponse() {
    if (linger && !peer_eof) return Linger();
    if (close_after || !keep_alive || peer_eof || s.stopping) return Close(true);
    BeginRequest();
    Read();
  }

  std::string ProbeBytes() const {
    if (!sig) return {};
    std::lock_guard<std::mutex> l(sig->mu);
    return sig->probe;
  }

  void Linger() {
    boost::system::error_code ec;
    sock.shutdown(tcp::socket::shutdown_send, ec);
    if (body_ticket != 0) s.bodies.Cancel(body_ticket);
    body_ticket = 0;
    body_hold.Reset();
    state = State::kLinger;
    in.consume(in.size());
    Arm(read_timer, kLingerSeconds);
    Read();
  }

  // The peer's side of the connection ended (EOF) or failed.
  void OnPeerClosed(bool eof) {
    if (state == State::kIdle) return Close(false);
    if (ReadingRequest() || state == State::kBodyWait) return Close(false);
    if (eof && !response_complete && !ProbeBytes().empty()) {
      // Perhaps only half-closed: a streamed answer finds out with its probe (now, or as soon as
      // the stream starts).
      peer_eof = true;
      if (streaming) Probe();
      return;
    }
    if (eof && state == State::kHandling) {
      // The handler may not have read far enough to declare a stream yet: a moment's grace.
      peer_eof = true;
      beat_timer.expires_after(kHalfCloseGrace);
      std::weak_ptr<Conn> w = weak_from_this();
      beat_timer.async_wait([w](const boost::system::error_code& ec) {
        if (ec) return;
        auto c = w.lock();
        if (c && c->state == State::kHandling && c->ProbeBytes().empty()) c->Gone();
      });
      return;
    }
    if (eof && response_complete) {
      peer_eof = true;  // the answer is written out, then the connection closes
      return;
    }
    Gone();
  }

  // On EOF during a streamed answer: a probe now and one shortly after; a peer that has closed
  // its socket answers the first with a reset, and the second write fails.
  void Probe() {
    if (probe_sent || !streaming) return;
    probe_sent = true;
    Queue(Chunk(ProbeBytes()));
    beat_timer.expires_after(kProbeDelay);
    std::weak_ptr<Conn> w = weak_from_this();
    beat_timer.async_wait([w](const boost::system::error_code& ec) {
      if (ec) return;
      auto c = w.lock();
      if (!c || c->state == State::kClosed || c->response_complete) return;
      c->Queue(Chunk(c->ProbeBytes()));
      if (!c->beat.empty() && c->beat_every.count() > 0) c->Beat();
    });
  }

  void Gone() {
    if (sig) {
      for (auto& f : sig->MarkGone()) f();
    }
    Close(false);
  }

  void OnTimer(asio::steady_timer* t) {
    if (state == State::kClosed) return;
    if (t == &write_timer) {
      ++s.timeouts;
      return Gone();
    }
    if (t != &read_timer) return;
    switch (state) {
      case State::kIdle:
        ++s.timeouts;
        return Close(false);
      case State::kHeader:
      case State::kBody:
        ++s.timeouts;
        return Refuse(408, state == State::kHeader ? "the request headers did not arrive in time"
                                                   : "the request body did not arrive in time");
      case State::kBodyWait:
        ++s.timeouts;
        return Refuse(503, "the server is receiving too many request bodies; retry later");
      case State::kLinger:
        return Close(false);
      default:
        return;
    }
  }

  // Ends the connection: `graceful` lets the peer read what was written.
  void Close(bool graceful) {
    if (state == State::kClosed) return;
    if (sig) {
      for (auto& f : sig->MarkGone()) f();
    }
    state = State::kClosed;
    read_timer.cancel();
    write_timer.cancel();
    beat_timer.cancel();
    if (body_ticket != 0) s.bodies.Cancel(body_ticket);
    body_ticket = 0;
    body_hold.Reset();
    boost::system::error_code ec;
    if (graceful) sock.shutdown(tcp::socket::shutdown_send, ec);
    sock.close(ec);
    auto it = s.per_client.find(client);
    if (it != s.per_client.end() && --it->second <= 0) s.per_client.erase(it);
    --s.open;
    s.conns.erase(id);
  }

  void DispatchRequest(Request req);
};

const RouteEntry* FindRoute(const std::vector<RouteEntry>& routes, const std::string& method, const std::string& path) {
  for (const RouteEntry& r : routes) {
    const bool match = r.prefix ? path.rfind(r.path, 0) == 0 : path == r.path;
    if (match && r.method == method) return &r;
  }
  return nullptr;
}

void Conn::DispatchRequest(Request req) {
  const RouteEntry* route = FindRoute(s.routes, req.method, req.path);
  sig = std::make_shared<ExchangeSignals>();
  auto st = std::make_shared<ExchangeState>();
  st->impl = s.self.lock();
  st->conn = weak_from_this();
  st->seq = seq;
  st->sig = sig;
  st->max_backlog = s.opts.max_stream_backlog_bytes;
  Exchange ex(std::move(st));
  if (route == nullptr) {  // cannot happen: OnHeader routed it
    ex.Send(s.ErrorResponse(req, 404, "no such endpoint: " + req.method + " " + req.path));
    return;
  }
  if (route->run == Server::Run::kInline) {
    route->handler(req, std::move(ex));
    body_hold.Reset();
    return;
  }
  // The body's budget goes with it to the worker and is given back once the handler returns.
  auto hold = std::make_shared<BudgetHold>(std::move(body_hold));
  auto shared_req = std::make_shared<Request>(std::move(req));
  const Handler* h = &route->handler;
  Exchange copy = ex;
  if (!s.Enqueue([h, shared_req, ex, hold]() mutable {
        (*h)(*shared_req, std::move(ex));
        shared_req->body.Clear();
        hold->Reset();
      })) {
    hold->Reset();
    Response r = s.ErrorResponse(*shared_req, 503, "the server has too many requests waiting; retry later");
    r.headers.push_back({"Retry-After", "1"});
    copy.Send(std::move(r));
  }
}

// ---- Exchange -------------------------------------------------------------------------------

ExchangeState::~ExchangeState() {
  if (answered.load() || !impl) return;
  std::weak_ptr<Conn> w = conn;
  const uint64_t my_seq = seq;
  asio::post(impl->io, [w, my_seq] {
    auto c = w.lock();
    if (!c || c->seq != my_seq || c->state != Conn::State::kHandling) return;
    c->SendNow(c->s.ErrorResponse(c->head, 500, "the request was not answered (internal error)"));
  });
}

Exchange::Exchange(std::shared_ptr<ExchangeState> s) : s_(std::move(s)) {}

void Exchange::Send(Response r) const {
  if (s_->answered.exchange(true)) return;
  std::weak_ptr<Conn> w = s_->conn;
  const uint64_t my_seq = s_->seq;
  asio::post(s_->impl->io, [w, my_seq, r = std::move(r)]() mutable {
    auto c = w.lock();
    if (!c || c->seq != my_seq || c->state != Conn::State::kHandling) return;
    c->SendNow(std::move(r));
  });
}

void Exchange::SetHalfCloseProbe(std::string probe) const {
  {
    std::lock_guard<std::mutex> l(s_->sig->mu);
    s_->sig->probe = std::move(probe);
  }
  std::weak_ptr<Conn> w = s_->conn;
  const uint64_t my_seq = s_->seq;
  asio::post(s_->impl->io, [w, my_seq] {
    auto c = w.lock();
    // A half-close seen before the probe was declared: the stream, once started, probes.
    if (c && c->seq == my_seq && c->peer_eof && c->state == Conn::State::kHandling) c->beat_timer.cancel();
  });
}

void Exchange::StartStream(int status, std::string content_type, std::vector<Header> headers, std::string keepalive,
                           std::chrono::milliseconds keepalive_every) const {
  if (s_->answered.exchange(true)) return;
  std::weak_ptr<Conn> w = s_->conn;
  const uint64_t my_seq = s_->seq;
  asio::post(s_->impl->io, [w, my_seq, status, type = std::move(content_type), hs = std::move(headers),
                            b = std::move(keepalive), keepalive_every]() mutable {
    auto c = w.lock();
    if (!c || c->seq != my_seq) return;
    c->StartStream(status, type, hs, std::move(b), keepalive_every);
  });
}

bool Exchange::Write(std::string bytes) const {
  ExchangeSignals& sig = *s_->sig;
  if (sig.gone.load()) return false;
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (sig.backlog.fetch_add(n) + n > s_->max_backlog) {
    // The reader fell too far behind: the connection is dropped.
    std::weak_ptr<Conn> w = s_->conn;
    asio::post(s_->impl->io, [w] {
      if (auto c = w.lock()) c->Gone();
    });
    for (auto& f : sig.MarkGone()) f();
    return false;
  }
  std::weak_ptr<Conn> w = s_->conn;
  const uint64_t my_seq = s_->seq;
  asio::post(s_->impl->io, [w, my_seq, b = std::move(bytes)]() mutable {
    auto c = w.lock();
    if (!c || c->seq != my_seq) return;
    c->StreamPiece(std::move(b));
  });
  return true;
}

void Exchange::End() const {
  std::weak_ptr<Conn> w = s_->conn;
  const uint64_t my_seq = s_->seq;
  asio::post(s_->impl->io, [w, my_seq] {
    auto c = w.lock();
    if (!c || c->seq != my_seq) return;
    c->StreamEnd();
  });
}

bool Exchange::client_gone() const { return s_->sig->gone.load(); }

const std::atomic<bool>& Exchange::gone_flag() const { return s_->sig->gone; }

void Exchange::OnClientGone(std::function<void()> f) const {
  ExchangeSignals& sig = *s_->sig;
  {
    std::lock_guard<std::mutex> l(sig.mu);
    if (sig.finished) return;
    if (!sig.gone.load()) {
      sig.on_gone.push_back(std::move(f));
      return;
    }
  }
  f();
}

// ---- the server -----------------------------------------------------------------------------

Response Server::Impl::ErrorResponse(const Request& head, int status, std::string_view message) const {
  if (error_page) return error_page(head, status, message);
  Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::string(message) + "\n";
  return r;
}

void Server::Impl::Accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket sock) {
    if (stopped) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors (or a transient failure): wait a little instead of spinning.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopped) Accept();
      });
      return;
    }
    OnAccept(std::move(sock));
    Accept();
  });
}

bool Server::Impl::MakeRoom(const std::string& client) {
  const bool total_full = static_cast<int64_t>(conns.size()) >= opts.max_connections;
  auto pc = per_client.find(client);
  const bool client_full = pc != per_client.end() && pc->second >= opts.max_connections_per_client;
  if (!total_full && !client_full) return true;
  // The oldest connection still waiting for (the rest of) a request: of this client when it is
  // the client that is over its share, of anyone when the server is full.
  Conn* victim = nullptr;
  for (auto& [id, c] : conns) {
    if (c->state != Conn::State::kIdle && c->state != Conn::State::kHeader && c->state != Conn::State::kLinger)
      continue;
    if (!total_full && c->client != client) continue;
    if (victim == nullptr || c->since < victim->since) victim = c.get();
  }
  if (victim == nullptr) return false;
  ++evicted;
  victim->Close(false);
  return true;
}

void Server::Impl::OnAccept(tcp::socket sock) {
  boost::system::error_code ec;
  const auto ep = sock.remote_endpoint(ec);
  if (ec) return;
  std::string client = ep.address().to_string();
  sock.set_option(tcp::no_delay(true), ec);
  if (!MakeRoom(client)) {
    ++refused;
    // A short answer written without waiting; the socket is closed either way.
    Request head;
    head.method = "?";
    head.client = client;
    Response r = ErrorResponse(head, 503, "the server has too many connections open; retry later");
    r.headers.push_back({"Retry-After", "1"});
    const std::string bytes = Head(r.status, r.content_type, r.headers, static_cast<int64_t>(r.body.size()), true) + r.body;
    sock.non_blocking(true, ec);
    ::send(sock.native_handle(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    sock.shutdown(tcp::socket::shutdown_both, ec);
    sock.close(ec);
    return;
  }
  ++accepted;
  const uint64_t id = next_conn++;
  auto c = std::make_shared<Conn>(*this, std::move(sock), client, id);
  conns[id] = c;
  ++open;
  ++per_client[client];
  c->Begin();
}

bool Server::Impl::Enqueue(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> l(work_mu);
    if (work_stop || static_cast<int64_t>(work.size()) >= opts.max_pending) return false;
    work.push_back(std::move(f));
  }
  work_cv.notify_one();
  return true;
}

void Server::Impl::WorkerLoop() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> l(work_mu);
      work_cv.wait(l, [&] { return work_stop || !work.empty(); });
      if (work_stop) return;
      f = std::move(work.front());
      work.pop_front();
    }
    f();
  }
}

Server::Server(Options opts) : impl_(std::make_shared<Impl>(std::move(opts))) { impl_->self = impl_; }

Server::~Server() { Stop(); }

void Server::Route(std::string method, std::string path, Run run, Handler h) {
  impl_->routes.push_back({std::move(method), std::move(path), false, run, std::move(h)});
}

void Server::RoutePrefix(std::string method, std::string prefix, Run run, Handler h) {
  impl_->routes.push_back({std::move(method), std::move(prefix), true, run, std::move(h)});
}

void Server::RunOnWorker(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> l(impl_->work_mu);
    if (impl_->work_stop) return;
    impl_->work.push_back(std::move(f));
  }
  impl_->work_cv.notify_one();
}

void Server::SetScreen(Screen s) { impl_->screen = std::move(s); }
void Server::SetErrorPage(ErrorPage p) { impl_->error_page = std::move(p); }
void Server::SetOnResponse(std::function<void(const Request&, int)> f) { impl_->on_response = std::move(f); }
void Server::SetDefaultHeaders(std::function<std::vector<Header>()> f) { impl_->default_headers = std::move(f); }

Result<int> Server::Start() {
  Impl& s = *impl_;
  if (s.started) return InvalidArgument("the HTTP server was started already");
  if (s.opts.port < 0 || s.opts.port > 65535)
    return InvalidArgument("port " + std::to_string(s.opts.port) + " is out of range (1-65535, or 0 for any free port)");
  if (s.opts.workers < 1 || s.opts.max_connections < 1 || s.opts.max_connections_per_client < 1 ||
      s.opts.max_body_bytes < 1 || s.opts.max_buffered_body_bytes < s.opts.max_body_bytes)
    return InvalidArgument("HTTP limits must be positive, and the buffered-body budget at least one body");
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(s.opts.host, ec);
  if (ec) return InvalidArgument("--host " + s.opts.host + " is not an IP address of this machine (" + ec.message() + ")");
  const tcp::endpoint ep(addr, static_cast<unsigned short>(s.opts.port));
  const std::string where = s.opts.host + ":" + std::to_string(s.opts.port);
  s.acceptor.open(ep.protocol(), ec);
  if (ec) return InvalidArgument("cannot listen on " + where + ": " + ec.message());
  // SO_REUSEADDR only lets a restarted server bind while old connections linger in TIME_WAIT; on
  // Linux it does not let two sockets listen on one port (SO_REUSEPORT would, and is not set).
  s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  s.acceptor.bind(ep, ec);
  if (ec == asio::error::address_in_use)
    return InvalidArgument("cannot listen on " + where + ": the port is in use (another server is listening there); "
                           "stop it or pick another --port");
  if (ec) return InvalidArgument("cannot listen on " + where + ": " + ec.message());
  s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return InvalidArgument("cannot listen on " + where + ": " + ec.message());
  s.port = s.acceptor.local_endpoint(ec).port();
  s.started = true;
  for (int i = 0; i < s.opts.workers; ++i) s.workers.emplace_back([&s] { s.WorkerLoop(); });
  s.Accept();
  s.io_thread = std::thread([&s] {
    for (;;) {
      try {
        s.io.run();
        return;
      } catch (const std::exception&) {
        // A handler threw on the I/O thread; the server keeps serving.
      }
    }
  });
  return s.port;
}

void Server::Stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  // First stop accepting and close what waits for a request; answers already being written get a
  // moment to reach their clients.
  asio::post(s.io, [&s] {
    s.stopping = true;
    boost::system::error_code ec;
    s.acceptor.close(ec);
    s.accept_retry.cancel();
    std::vector<std::shared_ptr<Conn>> idle;
    for (auto& [id, c] : s.conns)
      if (c->state != Conn::State::kHandling && c->state != Conn::State::kResponding) idle.push_back(c);
    for (auto& c : idle) c->Close(false);
  });
  const auto flush_until = SteadyClock::now() + kStopFlush;
  while (s.open.load() > 0 && SteadyClock::now() < flush_until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  asio::post(s.io, [&s] {
    s.stopped = true;
    std::vector<std::shared_ptr<Conn>> all;
    for (auto& [id, c] : s.conns) all.push_back(c);
    for (auto& c : all) c->Close(false);
    s.io.stop();
  });
  if (s.io_thread.joinable()) s.io_thread.join();
  {
    std::lock_guard<std::mutex> l(s.work_mu);
    s.work_stop = true;
    s.work.clear();
  }
  s.work_cv.notify_all();
  for (std::thread& t : s.workers) t.join();
  s.workers.clear();
  s.stopped = true;
}

int Server::port() const { return impl_->port; }

Stats Server::stats() const {
  Stats st;
  Impl& s = *impl_;
  st.connections_accepted = s.accepted.load();
  st.connections_refused = s.refused.load();
  st.connections_evicted = s.evicted.load();
  st.timeouts = s.timeouts.load();
  st.buffered_body_bytes = s.bodies.used();
  {
    std::lock_guard<std::mutex> l(s.work_mu);
    st.pending = static_cast<int64_t>(s.work.size());
  }
  st.connections = s.open.load();
  return st;
}

}  // namespace phi4mm::server::http
