// `phi4mm serve` as a process: it prints the port it picked for --port 0, answers /health, and on
// SIGTERM stops admitting (503), lets a running answer finish within --drain-seconds or cuts it
// off with an error event and [DONE] when the grace period is too short, and exits 0.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <future>
#include <thread>

#include "server_test_util.h"

extern char** environ;

namespace phi4mm::test {
namespace {

struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
};

ServeProcess SpawnServe(const std::string& drain_seconds) {
  ServeProcess p;
  int out[2];
  if (pipe(out) != 0) return p;
  std::vector<std::string> args = {PHI4MM_CLI_PATH, "serve", "-m", FixturePath("tiny/orig"), "--port", "0",
                                   "--drain-seconds", drain_seconds, "--kv-budget-gb", "0.25"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  const int rc = posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    p.pid = -1;
    return p;
  }
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  close(out[0]);
  const std::string prefix = "listening on http://127.0.0.1:";
  EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
  if (line.rfind(prefix, 0) == 0) p.port = std::stoi(line.substr(prefix.size()));
  for (int i = 0; i < 300; ++i) {
    httplib::Client cli("127.0.0.1", p.port);
    auto r = cli.Get("/health");
    if (r && r->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return p;
}

int WaitExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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
  for (int i = 0; i < 200 && MetricValue(Get(port, "/metrics").body, "phi4mm_requests_running") < 1; ++i)
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
