// Private to the HTTP layer (http_server.cc, connection.cc, message.cc): the server's state, the
// state an exchange shares with its connection, one connection's state machine (Conn, on the I/O
// thread only), the wire format, and Beast's body type for the request parser. Not installed or
// used elsewhere.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include "byte_budget.h"
#include "http_server.h"

namespace phi4mm::server::http {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

inline constexpr size_t kReadChunk = 64 << 10;
inline constexpr int64_t kBodyGrain = int64_t{1} << 20;  // body budget taken in steps of this
// Bytes a client may send ahead (pipelining) while its current request is answered; beyond, the
// connection stops reading until the answer is out.
inline constexpr size_t kMaxReadAhead = 64 << 10;
// After an EOF on a streamed answer: the second probe, whose failure shows the peer is gone.
inline constexpr auto kProbeDelay = std::chrono::milliseconds(200);
// An EOF while a handler runs: how long it has to declare a stream (and a probe) before the client
// counts as gone.
inline constexpr auto kHalfCloseGrace = std::chrono::milliseconds(250);
// Stop: how long answers already being written get to reach their clients.
inline constexpr auto kStopFlush = std::chrono::seconds(3);
// How long a refused request's remaining bytes are read and dropped before the socket closes.
inline constexpr double kLingerSeconds = 2;

// Case-insensitive equality (header names).
bool IEquals(std::string_view a, std::string_view b);
// The status line and headers of a response; `length` < 0: chunked.
std::string Head(int status, const std::string& content_type, const std::vector<Header>& headers, int64_t length,
                 bool close);
// One chunk of a chunked body.
std::string Chunk(std::string_view data);

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
  // The default headers that `own` does not name, followed by `own`.
  std::vector<Header> WithDefaults(const std::vector<Header>& own) const {
    std::vector<Header> all = default_headers ? default_headers() : std::vector<Header>{};
    std::erase_if(all, [&](const Header& d) {
      return std::any_of(own.begin(), own.end(), [&](const Header& o) { return IEquals(o.name, d.name); });
    });
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

// One connection (I/O thread only).
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

  // The request being received or answered, and its route (OnHeader finds it).
  uint64_t seq = 0;
  Request head;
  const RouteEntry* route = nullptr;
  bool keep_alive = true, close_after = false, response_complete = false, linger = false;
  BudgetHold body_hold;
  ByteBudget::Ticket body_ticket = 0;
  std::shared_ptr<ExchangeSignals> sig;
  // A streamed answer.
  bool streaming = false, probe_sent = false;
  std::string beat;
  std::chrono::milliseconds beat_every{0};
  SteadyClock::time_point last_write = SteadyClock::now();

  void Begin();
  void BeginRequest();
  void Arm(asio::steady_timer& t, double seconds);
  bool ReadingRequest() const { return state == State::kIdle || state == State::kHeader || state == State::kBody; }

  void Read();
  void OnBytes();
  void Parse();
  void RefuseTooLarge();

  // Headers complete: route, screen, announce. False when the request was answered already.
  bool OnHeader();

  // Keeps the body's bytes within what the body budget granted; false (reading paused) while a
  // grant is awaited.
  bool TakeBodyBudget();
  void AddHold(int64_t bytes);
  void OnComplete();
  void Queue(std::string bytes, int64_t backlog = 0);
  void Write();

  // A complete response for the current request, written now (I/O thread).
  void SendNow(Response r);
  void Refuse(int status, const std::string& message);
  void StartStream(int status, const std::string& type, const std::vector<Header>& headers, std::string b,
                   std::chrono::milliseconds every);
  void Beat();
  void StreamPiece(std::string bytes);
  void StreamEnd();
  void AfterResponse();
  std::string ProbeBytes() const;
  void Linger();

  // The peer's side of the connection ended (EOF) or failed.
  void OnPeerClosed(bool eof);

  // On EOF during a streamed answer: a probe now and one shortly after; a peer that has closed
  // its socket answers the first with a reset, and the second write fails.
  void Probe();
  void Gone();
  void OnTimer(asio::steady_timer* t);

  // Ends the connection: `graceful` lets the peer read what was written.
  void Close(bool graceful);
  void DispatchRequest(Request req);
};

}  // namespace phi4mm::server::http
