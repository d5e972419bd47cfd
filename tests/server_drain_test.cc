// `phi4mm serve` as a process: it prints the port it picked for --port 0, answers /health, and on
// SIGTERM stops admitting (503), lets a running answer finish within --drain-seconds or cuts it
// off with an error event and [DONE] when the grace period is too short, and exits 0.
#include <future>
#include <thread>

#include "server_test_util.h"

namespace phi4mm::test {
namespace {

ServeProcess SpawnServe(const std::string& drain_seconds) {
  ServeProcess p = SpawnServeArgs({"-m", FixturePath("tiny/orig"), "--port", "0", "--drain-seconds", drain_seconds,
                                   "--kv-budget-gb", "0.25"},
                                  true);
  EXPECT_GT(p.port, 0);
  if (p.stdout_fd >= 0) close(p.stdout_fd);
  for (int i = 0; i < 300 && p.port > 0; ++i) {
    httplib::Client cli("127.0.0.1", p.port);
    auto r = cli.Get("/health");
    if (r && r->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return p;
}

Json StreamBody(int max_tokens) {
  Json b = ChatBody({TextMessage("Write a long poem about the sea.")}, max_tokens);
  b["logit_bias"] = {{"200020", -100}, {"199999", -100}};
  b["stream"] = true;
  return b;
}

// Starts a streaming request and returns once the server reports it running.
std::future<HttpResult> StartStream(int port, int max_tokens) {
  auto f = std::async(std::launch::async, [port, max_tokens] {
    return Post(port, "/v1/chat/completions", StreamBody(max_tokens).dump());
  });
  for (int i = 0; i < 3000 && MetricValue(Get(port, "/metrics").body, "phi4mm_requests_running") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return f;
}

TEST(ServerDrain, SigtermLetsTheRunningAnswerFinishThenExitsZero) {
  ServeProcess p = SpawnServe("30");
  ASSERT_GT(p.pid, 0);
  ASSERT_GT(p.port, 0);
  auto stream = StartStream(p.port, 120);
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  httplib::Client cli("127.0.0.1", p.port);
  auto h = cli.Get("/health");
  if (h) {
    EXPECT_EQ(h->status, 503);  // unless the answer already ended and the server is gone
  }
  const HttpResult r = stream.get();
  const auto events = SseEvents(r.body);
  ASSERT_GE(events.size(), 2u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(Json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length") << r.body;
  EXPECT_EQ(WaitExit(p.pid), 0);
}

TEST(ServerDrain, SigtermCutsOffWhatOutlastsTheGracePeriod) {
  ServeProcess p = SpawnServe("0.2");
  ASSERT_GT(p.pid, 0);
  auto stream = StartStream(p.port, 490);
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  const HttpResult r = stream.get();
  const auto events = SseEvents(r.body);
  ASSERT_GE(events.size(), 2u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const Json err = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(err["error"]["type"], "unavailable_error") << events[events.size() - 2];
  EXPECT_EQ(WaitExit(p.pid), 0);
}

}  // namespace
}  // namespace phi4mm::test
