// `phi4mm serve` against clients that misbehave, on loopback, bounded in time: a chunked body far
// past the limit (413 within a second, memory flat), hundreds of connections that send their
// headers a byte at a time (/health stays fast, real requests are served), more connections than
// the server allows (the oldest idle one makes room), oversized headers, pipelining, half-closed
// clients, Expect: 100-continue, a port that is taken or out of range, a start that fails, and a
// signal while the model loads. The process-level cases run the real binary (PHI4MM_CLI_PATH).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <stb/stb_image_write.h>

#include "phi4mm/base/process_memory.h"
#include "server_test_util.h"

namespace phi4mm::test {
namespace {

using Steady = std::chrono::steady_clock;

double Since(Steady::time_point t) { return std::chrono::duration<double>(Steady::now() - t).count(); }

int ConnectNonBlocking(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads whatever arrives within `seconds` (until EOF).
std::string ReadFor(int fd, double seconds) {
  std::string got;
  const auto end = Steady::now() + std::chrono::duration<double>(seconds);
  char buf[65536];
  while (Steady::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(std::max(1.0, std::chrono::duration<double, std::milli>(end - Steady::now()).count()));
    if (poll(&p, 1, ms) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

int StatusOf(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.substr(9, 3).c_str());
}

TEST(ServerHostile, ChunkedBodyPastTheLimitIs413AtOnceWithFlatMemory) {
  server::ServerOptions so;
  so.max_body_bytes = int64_t{32} << 20;
  TestServer s = StartTestServer(so);
  ASSERT_GT(s.port, 0);
  Get(s.port, "/health");  // warm: the first connection's allocations are not the body's
  const int64_t rss_before = ResidentBytes();
  std::atomic<int64_t> rss_max{rss_before};
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      rss_max = std::max(rss_max.load(), ResidentBytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const int fd = RawConnect(s.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                    "Transfer-Encoding: chunked\r\n\r\n");
  ASSERT_GE(fd, 0);
  const auto t0 = Steady::now();
  // 200 MiB of one-letter chunks, written until the server stops taking them.
  std::thread sender([fd] {
    const std::string chunk = "100000\r\n" + std::string(1 << 20, 'a') + "\r\n";
    for (int i = 0; i < 200; ++i) {
      size_t off = 0;
      while (off < chunk.size()) {
        const ssize_t n = send(fd, chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return;
        off += static_cast<size_t>(n);
      }
    }
  });
  const std::string got = RawReadUntil(fd, "\r\n\r\n", 1 << 16);
  const double took = Since(t0);
  shutdown(fd, SHUT_RDWR);
  sender.join();
  close(fd);
  done = true;
  sampler.join();
  EXPECT_EQ(StatusOf(got), 413) << got.substr(0, 200);
  EXPECT_LT(took, 1.0) << "the 413 came after " << took << " s";
  const double growth_mib = static_cast<double>(rss_max.load() - rss_before) / (1 << 20);
  std::printf("[hostile] chunked 200 MiB: 413 after %.3f s, RSS growth at most %.1f MiB\n", took, growth_mib);
  EXPECT_LT(growth_mib, 50.0);
  for (int i = 0; i < 100 && s->http_stats().buffered_body_bytes != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s->http_stats().buffered_body_bytes, 0);
}

// 256 connections that each send their request line and headers a byte every 2 s (reconnecting
// when the server closes them at its header deadline) for 30 s, while /health is probed every
// 100 ms and a real chat request is sent every 2 s.
TEST(ServerHostile, SlowHeaderConnectionsDoNotStallHealthOrRequests) {
  const double seconds = std::getenv("PHI4MM_HOSTILE_SECONDS") ? std::atof(std::getenv("PHI4MM_HOSTILE_SECONDS")) : 30;
  TestServer s = StartTestServer();
  ASSERT_GT(s.port, 0);
  constexpr int kSlow = 256;
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  std::atomic<bool> stop{false};
  std::atomic<int64_t> reconnects{0};
  std::thread attacker([&] {
    std::vector<int> fds(kSlow, -1);
    std::vector<size_t> sent(kSlow, 0);
    while (!stop) {
      for (int i = 0; i < kSlow && !stop; ++i) {
        if (fds[i] < 0) {
          fds[i] = ConnectNonBlocking(s.port);
          sent[i] = 0;
          if (fds[i] >= 0) ++reconnects;
          continue;
        }
        const ssize_t n = send(fds[i], head.data() + sent[i] % head.size(), 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n == 1) {
          ++sent[i];
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) {
          close(fds[i]);
          fds[i] = -1;
        }
        char drop[4096];
        while (recv(fds[i], drop, sizeof drop, MSG_DONTWAIT) > 0) {
        }
      }
      for (int k = 0; k < 20 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int fd : fds)
      if (fd >= 0) close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<double> health_ms;
  int chats = 0, chats_ok = 0;
  const auto t0 = Steady::now();
  auto next_chat = Steady::now();
  while (Since(t0) < seconds) {
    const auto h0 = Steady::now();
    const HttpResult h = Get(s.port, "/health");
    health_ms.push_back(Since(h0) * 1000);
    EXPECT_EQ(h.status, 200);
    if (Steady::now() >= next_chat) {
      ++chats;
      const HttpResult r = Post(s.port, "/v1/chat/completions", ChatBody({TextMessage("Hello")}, 4).dump());
      chats_ok += r.status == 200;
      next_chat = Steady::now() + std::chrono::seconds(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  attacker.join();
  std::sort(health_ms.begin(), health_ms.end());
  const double p99 = health_ms[static_cast<size_t>(0.99 * static_cast<double>(health_ms.size() - 1))];
  const server::http::Stats hs = s->http_stats();
  std::printf("[hostile] %d slow connections for %.0f s: /health p50 %.1f ms, p99 %.1f ms, max %.1f ms over %zu probes; "
              "%d/%d chats answered; %lld connects, %lld header timeouts, %lld evictions\n",
              kSlow, seconds, health_ms[health_ms.size() / 2], p99, health_ms.back(), health_ms.size(), chats_ok, chats,
              static_cast<long long>(reconnects.load()), static_cast<long long>(hs.timeouts),
              static_cast<long long>(hs.connections_evicted));
  EXPECT_LT(p99, 100.0);
  EXPECT_EQ(chats_ok, chats);
  EXPECT_GT(chats, 0);
  if (seconds > 12) {
    EXPECT_GT(hs.timeouts, 0) << "the slow connections were never timed out";
  }
}

TEST(ServerHostile, WhenFullTheOldestIdleConnectionMakesRoom) {
  server::ServerOptions so;
  so.http.max_connections = 8;
  so.http.max_connections_per_client = 8;
  TestServer s = StartTestServer(so);
  ASSERT_GT(s.port, 0);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(RawConnect(s.port, ""));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Get(s.port, "/health").status, 200);
  EXPECT_GE(s->http_stats().connections_evicted, 1);
  // The evicted one is the first opened: the server closed it.
  EXPECT_EQ(ReadFor(idle[0], 1.0), "");
  for (int fd : idle) close(fd);
}

// A 4096x4096 PNG of flat blocks (small to send, 48 MiB to decode).
std::string BigPng() {
  constexpr int kSide = 4096;
  std::vector<uint8_t> px(static_cast<size_t>(kSide) * kSide * 3);
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x)
      for (int c = 0; c < 3; ++c) px[(static_cast<size_t>(y) * kSide + x) * 3 + c] = static_cast<uint8_t>(((x >> 9) * 37 + (y >> 9) * 91 + c * 50) & 255);
  std::string png;
  stbi_write_png_to_func([](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), static_cast<size_t>(size)); },
                         &png, kSide, kSide, 3, px.data(), kSide * 3);
  return png;
}

// 40 clients at once, each with a 4096x4096 PNG at detail high (36 crops: ~250 MiB to decode and
// preprocess, 9,600 prompt tokens) on the trained fixture, against a 512 MiB media budget: the
// requests that do not fit wait with their PNG only, and beyond what one such request alone makes
// the process hold, it grows by no more than the budget (and a second sequence's KV). The clients
// leave after 12 s; everything is released.
TEST(ServerHostile, ManyLargeImagesStayWithinTheMediaBudget) {
  auto trained = Model::Load(FixturePath("trained/orig"));
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  server::ServerOptions so;
  so.media_budget_bytes = int64_t{512} << 20;
  EngineOptions eo;
  eo.max_running = 2;
  eo.kv_budget_bytes = int64_t{1} << 30;
  eo.prefix_cache_bytes = int64_t{64} << 20;  // the caches have their own bounds; this test is about media
  TestServer s = StartTestServer(so, eo, *trained);
  ASSERT_GT(s.port, 0);
  constexpr int kClients = 40;
  const std::string png = BigPng();
  Json body = ChatBody({{{"role", "user"},
                         {"content", {{{"type", "image_url"},
                                       {"image_url", {{"url", "data:image/png;base64," + server::Base64Encode(png)},
                                                      {"detail", "high"}}}},
                                      {{"type", "text"}, {"text", "What is this?"}}}}}},
                       1);
  std::string request = RawPost("/v1/chat/completions", body.dump());
  request.insert(request.find("\r\n") + 2, "Connection: close\r\n");  // the answer ends the read
  // One request alone first: what the engine itself holds to encode and prefill such an image (and
  // the caches it fills) is in the baseline, so that the growth below is what waiting and
  // preprocessing requests hold.
  {
    const int fd = RawConnect(s.port, request);
    ASSERT_EQ(StatusOf(ReadFor(fd, 60.0)), 200);
    close(fd);
  }
  std::vector<std::string> requests(kClients, request);  // the clients' bytes, also before the baseline
  const int64_t rss0 = ResidentBytes();
  std::atomic<int64_t> rss_max{rss0};
  std::atomic<bool> stop{false};
  std::thread sampler([&] {
    while (!stop) {
      rss_max = std::max(rss_max.load(), ResidentBytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const int fd = RawConnect(s.port, requests[static_cast<size_t>(i)]);
      if (fd < 0) return;
      if (StatusOf(ReadFor(fd, 12.0)) == 200) ++answered;
      close(fd);
    });
  }
  for (auto& c : clients) c.join();
  // Requests whose clients left while they waited or decoded let go of the budget as they notice.
  std::string metrics;
  bool idle = false;
  for (int i = 0; i < 600 && !idle; ++i) {
    idle = WaitEngineIdle(s.port, 60, &metrics) && MetricValue(metrics, "phi4mm_media_budget_used_bytes") == 0 &&
           MetricValue(metrics, "phi4mm_media_budget_waiting") == 0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  sampler.join();
  const double growth_mib = static_cast<double>(rss_max.load() - rss0) / (1 << 20);
  std::printf("[hostile] %d x 4096^2 PNG (%zu KiB) at detail high, 512 MiB media budget: %d answered within 12 s, "
              "%.0f waited for the budget (its peak %.0f MiB), RSS growth at most %.0f MiB\n",
              kClients, png.size() >> 10, answered.load(), MetricValue(metrics, "phi4mm_media_budget_waits_total"),
              MetricValue(metrics, "phi4mm_media_budget_peak_bytes") / (1 << 20), growth_mib);
  EXPECT_TRUE(idle);
  EXPECT_GT(answered.load(), 0);
  EXPECT_GT(MetricValue(metrics, "phi4mm_media_budget_waits_total"), 0) << "the budget never held anyone back";
  EXPECT_EQ(MetricValue(metrics, "phi4mm_media_budget_used_bytes"), 0);
  EXPECT_EQ(MetricValue(metrics, "phi4mm_media_budget_waiting"), 0);
  // Beyond one request's baseline: the budget, the KV of the second running sequence (9,600
  // positions, 38 MiB), and the bodies the server has received (40 x 0.6 MiB).
  EXPECT_LT(growth_mib, 512 + 64);
}

// The HTTP layer alone, bodies budgeted one at a time: the second body arrives whole while the
// first holds the budget, waits unread for it, and is answered once the first is done (found by
// the http fuzz target: the parser was fed again after its message was complete).
TEST(ServerHostile, ABodyThatWaitsForTheBodyBudgetIsServedAfterwards) {
  server::http::Options o;
  o.port = 0;
  o.max_body_bytes = 64 << 10;
  o.max_buffered_body_bytes = 64 << 10;
  server::http::Server http(o);
  http.Route("POST", "/echo", server::http::Server::Run::kWorker, [](server::http::Request& req, server::http::Exchange ex) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server::http::Response r;
    r.content_type = "text/plain";
    r.body = std::to_string(req.body.size());
    ex.Send(std::move(r));
  });
  auto port = http.Start();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const std::string body(60 << 10, 'x');
  const std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string first, second;
  std::thread a([&] {
    const int fd = RawConnect(*port, request);
    first = ReadFor(fd, 5.0);
    close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int fd = RawConnect(*port, request);
  second = ReadFor(fd, 5.0);
  close(fd);
  a.join();
  EXPECT_EQ(StatusOf(first), 200) << first;
  EXPECT_EQ(StatusOf(second), 200) << second;
  EXPECT_NE(second.find("\r\n\r\n61440"), std::string::npos) << second;
  // A body's budget comes back when its handler returns, which can be just after the client has
  // read the answer the handler sent.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (http.stats().buffered_body_bytes != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(http.stats().buffered_body_bytes, 0);
}

TEST(ServerHostile, OversizedHeadersAre431) {
  TestServer s = StartTestServer();
  const int fd = RawConnect(s.port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'b') + "\r\n\r\n");
  const std::string got = ReadFor(fd, 2.0);
  close(fd);
  EXPECT_EQ(StatusOf(got), 431) << got.substr(0, 300);
}

TEST(ServerHostile, PipelinedRequestsAreAnsweredInOrder) {
  TestServer s = StartTestServer();
  const int fd = RawConnect(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                                    "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string got = ReadFor(fd, 3.0);
  close(fd);
  const size_t a = got.find("HTTP/1.1 200"), b = got.find("\"object\":\"list\""), c = got.find("HTTP/1.1 404");
  EXPECT_NE(a, std::string::npos) << got;
  EXPECT_NE(b, std::string::npos) << got;
  EXPECT_NE(c, std::string::npos) << got;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST(ServerHostile, ChunkedBodyWithinTheLimitAndExpectContinueAreServed) {
  TestServer s = StartTestServer();
  const std::string body = ChatBody({TextMessage("Hello")}, 4).dump();
  const std::string half1 = body.substr(0, body.size() / 2), half2 = body.substr(body.size() / 2);
  char l1[16], l2[16];
  std::snprintf(l1, sizeof l1, "%zx", half1.size());
  std::snprintf(l2, sizeof l2, "%zx", half2.size());
  const int fd = RawConnect(s.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                    "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n");
  const std::string cont = RawReadUntil(fd, "\r\n\r\n");
  EXPECT_EQ(cont.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << cont;
  const std::string chunks = std::string(l1) + "\r\n" + half1 + "\r\n" + l2 + "\r\n" + half2 + "\r\n0\r\n\r\n";
  ASSERT_EQ(send(fd, chunks.data(), chunks.size(), MSG_NOSIGNAL), static_cast<ssize_t>(chunks.size()));
  const std::string got = RawReadUntil(fd, "\"usage\"");
  close(fd);
  EXPECT_EQ(StatusOf(got), 200) << got.substr(0, 300);
  EXPECT_NE(got.find("chat.completion"), std::string::npos) << got.substr(0, 300);
}

TEST(ServerHostile, HalfClosedStreamingClientGetsItsWholeAnswer) {
  TestServer s = StartTestServer();
  Json b = ChatBody({TextMessage("Tell me about the sea.")}, 16);
  b["stream"] = true;
  const int fd = RawConnect(s.port, RawPost("/v1/chat/completions", b.dump()));
  shutdown(fd, SHUT_WR);  // the request is all sent: the client's side closes, its reading side stays
  const std::string got = RawReadUntil(fd, "data: [DONE]");
  close(fd);
  EXPECT_EQ(StatusOf(got), 200) << got.substr(0, 300);
  EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got;
}

TEST(ServerHostile, AnswerThatFailsAfterAdmissionGetsItsErrorStatus) {
  server::ServerOptions so;
  so.request_timeout_seconds = 0.3;
  EngineOptions eo;
  eo.after_step = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  TestServer s = StartTestServer(so, eo);
  Json b = ChatBody({TextMessage("Write a long poem about the sea.")}, 400);
  b["logit_bias"] = {{"200020", -100}, {"199999", -100}};
  const HttpResult r = Post(s.port, "/v1/chat/completions", b.dump());
  EXPECT_EQ(r.status, 504) << r.body.substr(0, 300);
  const Json j = r.json();
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j["error"]["code"], "request_timeout");
  EXPECT_TRUE(j["error"].contains("partial_text")) << r.body.substr(0, 300);
}

TEST(ServerHostile, PortInUseAndOutOfRangeAreClearErrors) {
  TestServer s = StartTestServer();
  server::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = s.port;
  server::Server second(so);
  auto r = second.Start();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("in use"), std::string::npos) << r.status().ToString();

  const std::string err = testing::TempDir() + "/serve_port_err.txt";
  ServeProcess p = SpawnServeArgs({"-m", FixturePath("tiny/orig"), "--port", std::to_string(s.port)}, false, err);
  ASSERT_GT(p.pid, 0);
  EXPECT_EQ(WaitExit(p.pid, 5), 1);
  close(p.stdout_fd);
  EXPECT_NE(ReadFile(err).find("in use"), std::string::npos) << ReadFile(err);

  p = SpawnServeArgs({"-m", FixturePath("tiny/orig"), "--port", "99999"}, false, err);
  ASSERT_GT(p.pid, 0);
  EXPECT_NE(WaitExit(p.pid, 5), 0);
  close(p.stdout_fd);
  EXPECT_NE(ReadFile(err).find("99999"), std::string::npos) << ReadFile(err);
}

TEST(ServerHostile, AFailedStartExitsAtOnceEveryTime) {
  const std::string err = testing::TempDir() + "/serve_start_err.txt";
  double slowest = 0;
  for (int i = 0; i < 50; ++i) {
    const auto t0 = Steady::now();
    ServeProcess p = SpawnServeArgs({"-m", "does-not-exist", "--port", "0"}, false, err);
    ASSERT_GT(p.pid, 0);
    const int rc = WaitExit(p.pid, 5);
    close(p.stdout_fd);
    slowest = std::max(slowest, Since(t0));
    ASSERT_EQ(rc, 1) << "run " << i << ": " << ReadFile(err);
  }
  std::printf("[hostile] 50 failed starts, the slowest exited after %.3f s\n", slowest);
  EXPECT_LT(slowest, 1.0);
}

TEST(ServerHostile, SigtermWhileTheModelLoadsExitsPromptly) {
  // A model folder whose config.json is a FIFO nobody writes: loading blocks on it for ever.
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "serve_blocked_model";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_EQ(mkfifo((dir / "config.json").c_str(), 0600), 0);
  ServeProcess p = SpawnServeArgs({"-m", dir.string(), "--port", "0"}, true);
  ASSERT_GT(p.pid, 0);
  ASSERT_GT(p.port, 0);
  EXPECT_EQ(Get(p.port, "/health").status, 503);  // loading
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Steady::now();
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  const int rc = WaitExit(p.pid, 5);
  close(p.stdout_fd);
  EXPECT_EQ(rc, 128 + SIGTERM);
  EXPECT_LT(Since(t0), 1.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phi4mm::test
