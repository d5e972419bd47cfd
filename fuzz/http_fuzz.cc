// libFuzzer target for the server's HTTP layer (tools/server/http): arbitrary bytes sent as a
// client's whole side of a connection to a real http::Server on loopback (an inline route, a
// worker route that echoes the body, a streamed route), then the client's sending side closed; and
// the same bytes through the multipart/form-data parser. Whatever arrives back must be HTTP/1.1
// responses (or nothing); any crash, sanitizer report, hang past libFuzzer's timeout or leak is a
// finding. A leading byte picks which multipart Content-Type the bytes are parsed under.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/http/http_server.h"
#include "server/http/multipart.h"

namespace {

using namespace phi4mm::server::http;

Server* Started() {
  static Server* server = [] {
    Options o;
    o.port = 0;
    o.max_body_bytes = 64 << 10;
    o.max_buffered_body_bytes = 256 << 10;
    o.max_header_bytes = 4 << 10;
    o.header_timeout = 0.5;
    o.body_timeout = 0.5;
    o.idle_timeout = 0.5;
    auto* s = new Server(o);
    s->Route("GET", "/health", Server::Run::kInline, [](Request&, Exchange ex) {
      Response r;
      r.body = "{}";
      ex.Send(std::move(r));
    });
    s->Route("POST", "/echo", Server::Run::kWorker, [](Request& req, Exchange ex) {
      Response r;
      r.content_type = "application/octet-stream";
      r.body = req.body.str();
      ex.Send(std::move(r));
    });
    s->Route("POST", "/stream", Server::Run::kWorker, [](Request& req, Exchange ex) {
      ex.SetHalfCloseProbe(": p\n\n");
      ex.StartStream(200, "text/event-stream");
      ex.Write("data: " + std::to_string(req.body.size()) + "\n\n");
      ex.End();
    });
    if (!s->Start().ok()) std::abort();
    return s;
  }();
  return server;
}

void SendAndRead(int port, const uint8_t* data, size_t size) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Thousands of connections a second can run the loopback out of ephemeral ports for a moment:
  // the harness waits, it is not a finding.
  int fd = -1;
  for (int tries = 0; fd < 0; ++tries) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    close(fd);
    fd = -1;
    if (tries == 500) {
      std::fprintf(stderr, "http_fuzz: cannot connect to the server: %s\n", std::strerror(errno));
      std::abort();
    }
    usleep(10000);
  }
  // Close with a reset, not a FIN: no TIME_WAIT is left on the client's side.
  linger lg{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string got;
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (!got.empty() && got.rfind("HTTP/1.1 ", 0) != 0) {
    std::fprintf(stderr, "http_fuzz: the answer is not HTTP/1.1: %.200s\n", got.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* kTypes[] = {"multipart/form-data; boundary=XyZ", "multipart/form-data; boundary=\"a b\"",
                                 "multipart/form-data; charset=utf-8; boundary=--", "text/plain"};
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto parts = ParseMultipart(body, kTypes[data[0] % 4]);
  if (parts.ok()) {
    for (const FormPart& p : *parts) {
      if (p.data.data() < body.data() || p.data.data() + p.data.size() > body.data() + body.size()) std::abort();
    }
  }
  (void)PercentDecode(body);
  SendAndRead(Started()->port(), data, size);
  return 0;
}
