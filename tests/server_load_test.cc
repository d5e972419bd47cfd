// A bounded loopback load test of `phi4mm serve` on the tiny model (the spec's section J, CI-sized):
// 32 concurrent clients x 8 requests mixing streamed and plain text, image, audio, image+audio,
// tools and requests cancelled after two chunks. Every answer must equal the answer the same
// request got alone (no cross-talk between batched requests); /health must answer within a second
// throughout; at the end the metrics must balance (nothing running or waiting, no KV reserved,
// every request counted, every cancellation counted). The clients run two identical rounds of 4
// requests each with the server idle between them; the heap bytes in use when idle after the
// second round must stay within 5% of those after the first (the caches are small enough to reach
// their limits in the first round, so growth would be a leak).
//
// Why heap bytes in use (glibc's mallinfo2, every arena) and not the resident size the spec names:
// measured at the same idle points, the resident size of this process varied by up to 20% from
// run to run and between rounds (130-290 MB) while the bytes in use stayed at 42.4-42.8 MB, even
// after malloc_trim. It counts freed memory that malloc keeps in the arenas of 48 HTTP threads and
// 32 in-process client threads, and their touched stacks, which depends on how the threads
// happened to interleave; a bound on it flaked without saying anything about leaks. (Both are
// printed.) Over 10 rounds the bytes in use grow by a shrinking amount per round (240 KB, ~100,
// then ~30 KB of 45 MB): chunks freed into the per-thread caches (tcache) still count as in use,
// and the threads' caches fill as each happens to serve more kinds of request. The server only
// ever listens on 127.0.0.1.
#include <malloc.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <mutex>
#include <thread>

#include "phi4mm/base/process_memory.h"
#include "server/metrics.h"
#include "server_test_util.h"

namespace phi4mm::test {
namespace {

constexpr int kClients = 32, kRounds = 2, kPerRound = 4, kPerClient = kRounds * kPerRound, kKinds = 7;

Json Part(const std::string& type, const std::string& fixture) {
  if (type == "image") return {{"type", "image_url"}, {"image_url", {{"url", DataUri("image/png", fixture)}, {"detail", "low"}}}};
  return {{"type", "input_audio"}, {"input_audio", {{"data", server::Base64Encode(ReadFile(FixturePath(fixture)))}, {"format", "wav"}}}};
}

// Request body of kind k (0 text stream, 1 text, 2 image, 3 audio, 4 image+audio, 5 tools,
// 6 cancelled stream).
Json Body(int k) {
  Json content;
  switch (k) {
    case 2: content = {Part("image", "images/tiny_5x7.png"), {{"type", "text"}, {"text", "What is this?"}}}; break;
    case 3: content = {Part("audio", "audio/tone_1s_16k.wav"), {{"type", "text"}, {"text", "What do you hear?"}}}; break;
    case 4: content = {Part("image", "images/tiny_5x7.png"), Part("audio", "audio/tone_1s_16k.wav")}; break;
    default: content = std::string(k == 1 ? "Name three rivers." : "Tell me about the sea.");
  }
  Json b = ChatBody({{{"role", "user"}, {"content", content}}}, k == 6 ? 200 : 12);
  if (k == 0 || k == 6) b["stream"] = true;
  if (k == 5)
    b["tools"] = Json::array({{{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}}}}}}});
  if (k == 6) b["logit_bias"] = {{"200020", -100}, {"199999", -100}};
  return b;
}

// The answer text of a response (streamed or not).
std::string AnswerText(const HttpResult& r, bool stream) {
  if (!stream) {
    const Json j = r.json();
    if (!j.is_object() || !j.contains("choices")) return "<no answer: " + r.body.substr(0, 200) + ">";
    const Json& c = j["choices"][0]["message"]["content"];
    return c.is_string() ? c.get<std::string>() : "";
  }
  std::string text;
  for (const std::string& e : SseEvents(r.body)) {
    if (e == "[DONE]") break;
    const Json c = Json::parse(e, nullptr, false);
    if (!c.is_object() || !c.contains("choices")) return "<bad event: " + e.substr(0, 200) + ">";
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  return text;
}

// Heap bytes in use: small-block and mmapped allocations of every arena.
int64_t HeapInUseBytes() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

TEST(ServerLoad, MixedConcurrentClientsGetTheirSoloAnswers) {
  // HTTP threads as `phi4mm serve` sizes them (max_running + max_queue + 8), and caches small enough
  // to reach their limits in the first round, so that heap growth after it would be a leak.
  server::ServerOptions so;
  EngineOptions eo;
  eo.prefix_cache_bytes = int64_t{8} << 20;
  eo.media_cache_bytes = int64_t{8} << 20;
  auto s = StartTestServer(so, eo);
  std::vector<std::string> bodies, reference;
  for (int k = 0; k < kKinds; ++k) bodies.push_back(Body(k).dump());
  for (int k = 0; k < 6; ++k) {
    auto r = Post(s.port, "/v1/chat/completions", bodies[k]);
    ASSERT_EQ(r.status, 200) << "kind " << k << ": " << r.body.substr(0, 300);
    reference.push_back(AnswerText(r, k == 0));
  }

  std::atomic<bool> stop{false};
  std::atomic<int> slow_health{0}, health_checks{0};
  std::thread prober([&] {
    while (!stop) {
      const auto t0 = std::chrono::steady_clock::now();
      httplib::Client cli("127.0.0.1", s.port);
      auto h = cli.Get("/health");
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!h || h->status != 200 || dt > 1.0) ++slow_health;
      ++health_checks;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });

  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> cancelled{0}, sent{0};
  std::vector<int64_t> heap, rss;  // heap bytes in use and resident bytes when idle after each round
  // Runs once all clients finish a round (on the last one to arrive): idle server, then measure.
  auto round_end = [&]() noexcept {
    WaitEngineIdle(s.port, 10.0);
    heap.push_back(HeapInUseBytes());
    rss.push_back(ResidentBytes());
  };
  std::barrier round_barrier(kClients, round_end);
  auto client = [&](int c) {
    for (int i = 0; i < kPerClient; ++i) {
      const int k = (c * kPerClient + i) % kKinds;
      ++sent;
      if (k == 6) {
        const int fd = RawConnect(s.port, RawPost("/v1/chat/completions", bodies[k]));
        std::string got;
        for (int reads = 0; reads < 200; ++reads) {
          size_t n = 0;
          for (size_t at = got.find("data: "); at != std::string::npos; at = got.find("data: ", at + 1)) ++n;
          if (n >= 3) break;
          const std::string more = RawReadUntil(fd, "\n\n");
          if (more.empty()) break;
          got += more;
        }
        close(fd);
        ++cancelled;
      } else {
        auto r = Post(s.port, "/v1/chat/completions", bodies[k]);
        const std::string text = r.status == 200 ? AnswerText(r, k == 0) : "<status " + std::to_string(r.status) + ">";
        if (text != reference[k]) {
          std::lock_guard<std::mutex> l(mu);
          failures.push_back("client " + std::to_string(c) + " request " + std::to_string(i) + " kind " +
                             std::to_string(k) + ": got '" + text + "', alone '" + reference[k] + "'");
        }
      }
      if ((i + 1) % kPerRound == 0) round_barrier.arrive_and_wait();
    }
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) clients.emplace_back(client, c);
  for (auto& t : clients) t.join();
  stop = true;
  prober.join();

  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(slow_health.load(), 0) << "of " << health_checks.load() << " health checks";
  std::string m;
  WaitEngineIdle(s.port, 10.0, &m);
  EXPECT_EQ(MetricValue(m, "phi4mm_requests_running"), 0);
  EXPECT_EQ(MetricValue(m, "phi4mm_requests_waiting"), 0);
  EXPECT_EQ(MetricValue(m, "phi4mm_kv_cache_bytes"), 0);
  EXPECT_EQ(MetricValue(m, "phi4mm_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}"), sent.load() + 6);
  EXPECT_EQ(MetricValue(m, "phi4mm_cancelled_total{reason=\"disconnect\"}"), cancelled.load());
  ASSERT_EQ(heap.size(), size_t{kRounds});
  std::printf("[load] when idle after each round: heap bytes in use");
  for (int64_t b : heap) std::printf(" %lld", static_cast<long long>(b));
  std::printf(", resident bytes");
  for (int64_t b : rss) std::printf(" %lld", static_cast<long long>(b));
  std::printf("\n");
  EXPECT_LE(heap.back(), heap.front() + heap.front() / 20) << "heap in use grew from " << heap.front() << " to " << heap.back();
}

}  // namespace
}  // namespace phi4mm::test
