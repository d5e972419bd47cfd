// The HTTP/1.1 server (http_server.h): accepting (with the connection limits), the workers, the
// exchanges' thread-safe calls (each posted to the I/O thread), start and stop. One connection's
// state machine is in connection.cc, the wire format in message.cc.
#include "server_impl.h"

#include <sys/socket.h>

#include <algorithm>

#include <boost/asio/post.hpp>

namespace phi4mm::server::http {

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
