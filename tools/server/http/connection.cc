// One connection's state machine (server_impl.h, Conn), on the I/O thread: a continuous read into
// its buffer that feeds Beast's request parser by hand (put), so the same read that parses a
// request also notices a client leaving while its answer is computed; the deadlines; the body
// budget; dispatching to the handler; writing complete and streamed answers; half-closes, lingering
// after a refusal, and closing.
#include "server_impl.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace phi4mm::server::http {

void Conn::Begin() {
  BeginRequest();
  Read();
}

void Conn::BeginRequest() {
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

void Conn::Arm(asio::steady_timer& t, double seconds) {
  t.expires_after(std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds)));
  std::weak_ptr<Conn> w = weak_from_this();
  asio::steady_timer* tp = &t;
  t.async_wait([w, tp](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto c = w.lock()) c->OnTimer(tp);
  });
}

void Conn::Read() {
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

void Conn::OnBytes() {
  if (state == State::kIdle && in.size() > 0) {
    state = State::kHeader;
    Arm(read_timer, s.opts.header_timeout);
  }
  if (state == State::kHeader || state == State::kBody) Parse();
}

void Conn::Parse() {
  while (state == State::kHeader || state == State::kBody) {
    // A body can be complete before its budget was granted (TakeBodyBudget): nothing more to parse.
    if (parser->is_done()) return OnComplete();
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

void Conn::RefuseTooLarge() {
  Refuse(413, "the request body is larger than the server's limit of " +
                  std::to_string(s.opts.max_body_bytes >> 20) + " MiB");
}

bool Conn::OnHeader() {
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
  route = nullptr;
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

bool Conn::TakeBodyBudget() {
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

void Conn::AddHold(int64_t bytes) {
  if (body_hold.bytes() == 0) body_hold = BudgetHold(&s.bodies, bytes);
  else body_hold.Add(bytes);
}

void Conn::OnComplete() {
  read_timer.cancel();
  state = State::kHandling;
  Request req = head.Head();  // `head` stays for the response's bookkeeping; the body goes to the handler
  req.body = std::move(parser->get().body());
  parser.reset();
  DispatchRequest(std::move(req));
  Read();  // watches for the client leaving (and keeps what it sends ahead)
}

void Conn::Queue(std::string bytes, int64_t backlog) {
  out.emplace_back(std::move(bytes), backlog);
  if (!writing) Write();
}

void Conn::Write() {
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

void Conn::SendNow(Response r) {
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

void Conn::Refuse(int status, const std::string& message) {
  close_after = true;
  if (head.method.empty()) head.method = "?";
  SendNow(s.ErrorResponse(head, status, message));
}

void Conn::StartStream(int status, const std::string& type, const std::vector<Header>& headers, std::string b,
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

void Conn::Beat() {
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

void Conn::StreamPiece(std::string bytes) {
  if (state != State::kResponding || !streaming || response_complete) return;
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (n == 0) return;
  Queue(Chunk(bytes), n);
}

void Conn::StreamEnd() {
  if (state != State::kResponding || !streaming || response_complete) return;
  {
    std::lock_guard<std::mutex> l(sig->mu);
    sig->finished = true;
  }
  response_complete = true;
  beat_timer.cancel();
  Queue("0\r\n\r\n");
}

void Conn::AfterResponse() {
  if (linger && !peer_eof) return Linger();
  if (close_after || !keep_alive || peer_eof || s.stopping) return Close(true);
  BeginRequest();
  Read();
}

std::string Conn::ProbeBytes() const {
  if (!sig) return {};
  std::lock_guard<std::mutex> l(sig->mu);
  return sig->probe;
}

void Conn::Linger() {
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

void Conn::OnPeerClosed(bool eof) {
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

void Conn::Probe() {
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

void Conn::Gone() {
  if (sig) {
    for (auto& f : sig->MarkGone()) f();
  }
  Close(false);
}

void Conn::OnTimer(asio::steady_timer* t) {
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

void Conn::Close(bool graceful) {
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

void Conn::DispatchRequest(Request req) {
  sig = std::make_shared<ExchangeSignals>();
  auto st = std::make_shared<ExchangeState>();
  st->impl = s.self.lock();
  st->conn = weak_from_this();
  st->seq = seq;
  st->sig = sig;
  st->max_backlog = s.opts.max_stream_backlog_bytes;
  Exchange ex(std::move(st));
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

}  // namespace phi4mm::server::http
