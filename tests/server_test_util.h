// Helpers of the server tests: an in-process `phi4mm serve` on a loopback port over the tiny
// fixture model, an HTTP client (cpp-httplib's), raw sockets for disconnects, SSE and Prometheus
// text parsing, and chat request bodies with fixture media inlined as data: URIs.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/media_input.h"
#include "server/server.h"
#include "test_util.h"

extern char** environ;

namespace phi4mm::test {

using Json = nlohmann::json;

struct TestServer {
  std::unique_ptr<server::Server> srv;
  int port = 0;
  server::Server* operator->() { return srv.get(); }
};

inline TestServer StartTestServer(server::ServerOptions so = {}, EngineOptions eo = {},
                                  std::shared_ptr<const Model> model = nullptr) {
  TestServer t;
  so.host = "127.0.0.1";
  so.port = 0;
  if (so.served_name == "phi4mm") so.served_name = "tiny";
  so.build = {"test", "none", "auto", ""};
  t.srv = std::make_unique<server::Server>(so);
  auto port = t.srv->Start();
  EXPECT_TRUE(port.ok()) << port.status().ToString();
  t.port = port.ok() ? *port : 0;
  if (!model) model = TinyModel("orig");
  if (eo.kv_budget_bytes == 0) eo.kv_budget_bytes = int64_t{256} << 20;
  auto engine = Engine::Start(model, eo);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (engine.ok()) t.srv->SetEngine(model, std::move(engine).value());
  return t;
}

struct HttpResult {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  Json json() const { return Json::parse(body, nullptr, false); }
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? "" : it->second;
  }
};

inline HttpResult Post(int port, const std::string& path, const std::string& body, httplib::Headers headers = {},
                       const std::string& type = "application/json") {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  auto r = cli.Post(path.c_str(), headers, body, type.c_str());
  HttpResult out;
  if (!r) {
    ADD_FAILURE() << "POST " << path << " failed: " << httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  return out;
}

inline HttpResult Get(int port, const std::string& path, httplib::Headers headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30, 0);
  auto r = cli.Get(path.c_str(), headers);
  HttpResult out;
  if (!r) {
    ADD_FAILURE() << "GET " << path << " failed: " << httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  return out;
}

// The data payloads of an SSE body, in order (comments skipped).
inline std::vector<std::string> SseEvents(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

// The value of a Prometheus sample line `name_and_labels value`; -1 when absent.
inline double MetricValue(const std::string& text, const std::string& name_and_labels) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name_and_labels + " ", 0) == 0) return std::stod(line.substr(name_and_labels.size() + 1));
  }
  return -1;
}

// Waits up to `seconds` until the engine runs and queues nothing and reserves no KV (a cancelled
// request ends within a step or two of its client leaving); returns whether it got there, and the
// last /metrics text in `*metrics` when given.
inline bool WaitEngineIdle(int port, double seconds, std::string* metrics = nullptr) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    const std::string m = Get(port, "/metrics").body;
    if (metrics) *metrics = m;
    if (MetricValue(m, "phi4mm_requests_running") == 0 && MetricValue(m, "phi4mm_requests_waiting") == 0 &&
        MetricValue(m, "phi4mm_kv_cache_bytes") == 0)
      return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

inline std::string DataUri(const std::string& mime, const std::string& fixture_rel) {
  return "data:" + mime + ";base64," + server::Base64Encode(ReadFile(FixturePath(fixture_rel)));
}

inline Json TextMessage(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

// `messages` is a vector, not a Json: `Json m = {one_json_value}` is a copy of that value with
// clang but a one-element array with gcc (the initializer-list rules differ), so a one-message
// list written in braces must not become a Json directly.
inline Json ChatBody(std::vector<Json> messages, int max_tokens) {
  return {{"model", "tiny"}, {"messages", Json(std::move(messages))}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Connects to the server, sends `request` raw; returns the socket (or -1).
inline int RawConnect(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return fd;
}

// Reads from `fd` until `needle` appeared (or EOF / `max_bytes`); returns what was read.
inline std::string RawReadUntil(int fd, const std::string& needle, size_t max_bytes = 1 << 20) {
  std::string got;
  char buf[4096];
  while (got.find(needle) == std::string::npos && got.size() < max_bytes) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

inline std::string RawPost(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A `phi4mm serve` process (PHI4MM_CLI_PATH) started with `args` after "serve"; its stderr goes to
// `stderr_path` (or /dev/null). With `wait_listening`, reads its "listening on" line for the port.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  int stdout_fd = -1;  // the rest of its stdout (when not waiting for the listening line: all of it)
};

inline ServeProcess SpawnServeArgs(const std::vector<std::string>& args, bool wait_listening,
                                   const std::string& stderr_path = "/dev/null") {
  ServeProcess p;
  int out[2];
  if (pipe(out) != 0) return p;
  std::vector<std::string> all = {PHI4MM_CLI_PATH, "serve"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    p.pid = -1;
    return p;
  }
  p.stdout_fd = out[0];
  if (!wait_listening) return p;
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  const std::string prefix = "listening on http://127.0.0.1:";
  if (line.rfind(prefix, 0) == 0) p.port = std::stoi(line.substr(prefix.size()));
  return p;
}

// Waits for the process to exit; its exit code (128 + signal when killed). With `seconds` > 0,
// gives up after that long and returns -1 (the process is then killed).
inline int WaitExit(pid_t pid, double seconds = 0) {
  int status = 0;
  if (seconds > 0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) break;
      if (std::chrono::steady_clock::now() >= end) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } else {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace phi4mm::test
