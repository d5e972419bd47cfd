// `phi4mm serve`: the OpenAI-compatible HTTP server (tools/server) over the batched engine. Binds
// first (so /health answers 503 "Loading model" while the checkpoint loads; a port in use is an
// error at once), prints "listening on http://HOST:PORT", loads (the vision and speech towers too,
// unless --lazy-towers), opens the API, then waits for SIGTERM/SIGINT: stop admitting, let running
// answers finish for --drain-seconds, cancel the rest, exit 0. A signal during loading exits at
// once (128 + the signal); a failed start exits 1 with the error.
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>
#include <fstream>
#include <filesystem>

#include "server/server.h"
#include "cli_common.h"

namespace phi4mm::cli {

void ServeFlags::Register(CLI::App* app) {
  model.Register(app);
  app->add_option("--host", host, "Address to listen on (loopback by default; put a reverse proxy in front to expose it)")
      ->capture_default_str();
  app->add_option("--port", port, "Port; 0 picks a free one (printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app->add_option("--api-key", api_keys, "Require Authorization: Bearer KEY (repeatable; prefer --api-key-file or "
                                         "PHI4MM_API_KEY, which stay out of the process list)");
  app->add_option("--api-key-file", api_key_file, "File with one API key per line");
  app->add_option("--alias", alias, "Model name served in /v1/models and answers (default: the folder's name)");
  app->add_option("--max-running", max_running, "Sequences decoded together")->capture_default_str();
  app->add_option("--max-queue", max_queue, "Requests waiting for the engine before 429")->capture_default_str();
  app->add_option("--kv-budget-gb", kv_budget_gb, "KV-cache budget in GiB; 0 = half the available memory")
      ->capture_default_str();
  app->add_option("--prefill-chunk", prefill_chunk, "Prompt rows per engine step")->capture_default_str();
  app->add_option("--kv-swap-dir", kv_swap_dir,
                  "Where the caches of preempted requests are swapped out (default: the temporary directory; put it "
                  "on a disk, not tmpfs, to free memory)");
  app->add_option("--kv-swap-gb", kv_swap_gb,
                  "Swap space for preempted caches in GiB; -1 = the KV budget's size, 0 = recompute them instead")
      ->capture_default_str();
  app->add_option("--prefix-cache-mb", prefix_cache_mb, "KV of finished requests kept for reuse by later turns")
      ->capture_default_str();
  app->add_option("--media-cache-mb", media_cache_mb, "Encoded images and clips kept for reuse")->capture_default_str();
  app->add_option("--max-body-mb", max_body_mb, "Largest request body (413 beyond)")->capture_default_str();
  app->add_option("--max-media-mb", max_media_mb, "Largest image or audio item, encoded (413 beyond)")
      ->capture_default_str();
  app->add_option("--max-images", max_images, "Images per request")->capture_default_str();
  app->add_option("--speculative", speculative,
                  "Speculative decoding for requests that do not choose (their \"speculative\" field): none, or ngram "
                  "(drafts from earlier text, verified in one step; the same answers). A request's \"prediction\" "
                  "drafts from its content either way")
      ->check(CLI::IsMember({"none", "ngram"}))
      ->capture_default_str();
  app->add_option("--draft-max", draft_max, "Drafted tokens per verify step, at most")
      ->check(CLI::Range(1, kMaxDraft))
      ->capture_default_str();
  app->add_option("--ngram-pool-mb", ngram_pool_mb,
                  "ngram requests also draft from what earlier requests' text continued the same ids with, in a table "
                  "of this size; 0 = off (then no request's text can speed up another's)")
      ->capture_default_str();
  app->add_option("--max-audios", max_audios, "Audio clips per request")->capture_default_str();
  app->add_option("--max-image-pixels", max_image_pixels, "Largest image (width x height), checked from the header")
      ->capture_default_str();
  app->add_option("--max-audio-seconds", max_audio_seconds, "Longest audio clip, checked from the header")
      ->capture_default_str();
  app->add_option("--dynamic-hd", dynamic_hd,
                  "Crops per image for detail auto (0 = the checkpoint's value; 4 makes CPU photos much cheaper)")
      ->capture_default_str();
  app->add_option("--max-dynamic-hd", max_dynamic_hd, "Crops per image for detail high and the dynamic_hd cap (0 = checkpoint)")
      ->capture_default_str();
  app->add_option("--default-max-tokens", default_max_tokens, "New tokens when a request sets no limit")
      ->capture_default_str();
  app->add_option("--request-timeout", request_timeout, "Seconds a request may take in all")->capture_default_str();
  app->add_flag("--lazy-towers", lazy_towers,
                "Load the vision and speech towers on their first request instead of before serving (less memory "
                "for text-only use; that first request then stalls every running answer while the tower loads, "
                "and a tower that cannot load fails requests instead of the start)");
  app->add_option("--drain-seconds", drain_seconds, "Seconds running answers get to finish after SIGTERM")
      ->capture_default_str();
  app->add_option("--media-dir", media_dir, "Allow file:// image/audio URLs under this folder (off by default)");
  app->add_option("--sse-ping-seconds", sse_ping_seconds, "Keep-alive interval while an answer is silent")
      ->capture_default_str();
  app->add_flag("--metrics-public", metrics_public, "Serve /metrics without the API key");
  app->add_flag("--no-webui", no_webui, "Do not serve the chat page at /");
  app->add_option("--max-connections", max_connections,
                  "Open connections in all (when full, the oldest one still waiting for a request is closed)")
      ->capture_default_str();
  app->add_option("--max-connections-per-client", max_connections_per_client, "Open connections per client address")
      ->capture_default_str();
  app->add_option("--header-timeout", header_timeout, "Seconds a request's line and headers may take to arrive")
      ->capture_default_str();
  app->add_option("--body-timeout", body_timeout, "Seconds a request body may take to arrive")->capture_default_str();
  app->add_option("--idle-timeout", idle_timeout, "Seconds an idle keep-alive connection stays open")
      ->capture_default_str();
  app->add_option("--http-workers", http_workers,
                  "Threads that parse requests and decode their media (the model runs on its own thread)")
      ->capture_default_str();
  app->add_option("--media-budget-mb", media_budget_mb,
                  "Decoded images and audio held by requests the engine has not encoded yet; more waits")
      ->capture_default_str();
}

namespace {

Result<std::vector<std::string>> ApiKeys(const ServeFlags& f) {
  std::vector<std::string> keys = f.api_keys;
  if (!f.api_key_file.empty()) {
    std::ifstream in(f.api_key_file);
    if (!in) return InvalidArgument("--api-key-file " + f.api_key_file + ": cannot be read");
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) keys.push_back(line);
    }
    if (keys.empty()) return InvalidArgument("--api-key-file " + f.api_key_file + ": holds no key");
  }
  if (const char* env = std::getenv("PHI4MM_API_KEY"); env && *env) keys.emplace_back(env);
  return keys;
}

}  // namespace

namespace {

// SIGTERM and SIGINT, caught by a thread of their own from the start: during loading they end the
// process at once (there is nothing to drain); once serving, they start the drain.
class Signals {
 public:
  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    // Every thread started from here inherits the mask, so only the waiter below takes them.
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] {
      int sig = 0;
      while (sigwait(&set_, &sig) == 0) {
        std::unique_lock<std::mutex> l(mu_);
        if (stopping_) return;  // the process is ending on its own
        if (!serving_) {
          std::fprintf(stderr, "[phi4mm] %s while loading: exiting\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
          std::fflush(stderr);
          std::_Exit(128 + sig);
        }
        signal_ = sig;
        cv_.notify_all();
        return;
      }
    });
  }
  ~Signals() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    if (signal_ == 0) pthread_kill(thread_.native_handle(), SIGTERM);  // wakes the sigwait
    thread_.join();
  }
  // From now on a signal drains instead of exiting.
  void Serving() {
    std::lock_guard<std::mutex> l(mu_);
    serving_ = true;
  }
  int Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return signal_ != 0; });
    return signal_;
  }

 private:
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool serving_ = false, stopping_ = false;
  int signal_ = 0;
  std::thread thread_;
};

// Enough descriptors for --max-connections (the soft limit is often 1024).
void RaiseDescriptorLimit(int64_t connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t want = static_cast<rlim_t>(connections + 256);
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace

int ServeCommand(const ServeFlags& f) {
  if (f.max_body_mb < 1 || f.max_media_mb < 1 || f.max_images < 0 || f.max_audios < 0 || f.max_image_pixels < 1 ||
      f.max_audio_seconds < 1 || f.max_audio_seconds > kMaxAudioSeconds || f.request_timeout <= 0 ||
      f.drain_seconds < 0 || f.dynamic_hd < 0 || f.max_dynamic_hd < 0 || f.default_max_tokens < 1 ||
      f.max_connections < 1 || f.max_connections_per_client < 1 || f.http_workers < 1 || f.header_timeout <= 0 ||
      f.body_timeout <= 0 || f.idle_timeout <= 0 || f.media_budget_mb < 1 || f.prefix_cache_mb < 0 ||
      f.media_cache_mb < 0 || f.ngram_pool_mb < 0)
    return ReportError(InvalidArgument("serve limits must be positive (and --max-audio-seconds at most " +
                                       std::to_string(kMaxAudioSeconds) + ")"));
  auto keys = ApiKeys(f);
  if (!keys.ok()) return ReportError(keys.status());
  if (!f.media_dir.empty() && !std::filesystem::is_directory(f.media_dir))
    return ReportError(InvalidArgument("--media-dir " + f.media_dir + " is not a folder"));
  if (!f.kv_swap_dir.empty() && !std::filesystem::is_directory(f.kv_swap_dir))
    return ReportError(InvalidArgument("--kv-swap-dir " + f.kv_swap_dir + " is not a folder"));

  server::ServerOptions so;
  so.host = f.host;
  so.port = f.port;
  so.api_keys = std::move(keys).value();
  so.served_name = f.alias;
  if (so.served_name.empty()) {
    so.served_name = std::filesystem::path(f.model.dir).filename().string();
    if (so.served_name.empty()) so.served_name = std::filesystem::path(f.model.dir).parent_path().filename().string();
    if (so.served_name.empty()) so.served_name = "phi4mm";
  }
  so.limits.media.max_media_bytes = f.max_media_mb << 20;
  so.limits.media.max_image_pixels = f.max_image_pixels;
  so.limits.media.max_audio_seconds = f.max_audio_seconds;
  so.limits.media.media_dir = f.media_dir;
  so.limits.max_images = f.max_images;
  so.limits.max_audios = f.max_audios;
  so.limits.speculative = ParseSpeculativeMode(f.speculative).value_or(SpeculativeMode::kNone);
  so.limits.draft_max = f.draft_max;
  so.limits.dynamic_hd = f.dynamic_hd;
  so.limits.max_dynamic_hd = f.max_dynamic_hd;
  so.limits.default_max_tokens = f.default_max_tokens;
  so.max_body_bytes = f.max_body_mb << 20;
  so.request_timeout_seconds = f.request_timeout;
  so.sse_ping_seconds = f.sse_ping_seconds;
  so.metrics_public = f.metrics_public;
  so.webui = !f.no_webui;
  so.http.max_connections = static_cast<int>(f.max_connections);
  so.http.max_connections_per_client = static_cast<int>(f.max_connections_per_client);
  so.http.workers = static_cast<int>(f.http_workers);
  so.http.header_timeout = f.header_timeout;
  so.http.body_timeout = f.body_timeout;
  so.http.idle_timeout = f.idle_timeout;
  so.media_budget_bytes = f.media_budget_mb << 20;
  so.build = {PHI4MM_VERSION_STRING, f.model.quant, f.model.kv_dtype, so.served_name};

  std::signal(SIGPIPE, SIG_IGN);
  RaiseDescriptorLimit(f.max_connections);
  Signals signals;

  server::Server srv(so);
  auto port = srv.Start();
  if (!port.ok()) return ReportError(port.status());
  std::printf("listening on http://%s:%d\n", f.host.c_str(), *port);
  if (so.webui) std::printf("chat page: http://%s:%d/\n", f.host.c_str(), *port);
  std::fflush(stdout);

  auto model = LoadModel(f.model);
  if (!model.ok()) return ReportError(model.status());
  if (!f.lazy_towers) {
    // Before /health turns 200: a broken tower fails the start with its message, and the first
    // image or audio request does not load one on the engine thread while answers are running.
    if (auto v = (*model)->vision(); !v.ok()) return ReportError(v.status());
    if (auto a = (*model)->speech(); !a.ok()) return ReportError(a.status());
  }
  EngineOptions eo;
  eo.max_running = f.max_running;
  eo.max_queue = f.max_queue;
  eo.prefill_chunk = f.prefill_chunk;
  eo.kv_budget_bytes = static_cast<int64_t>(f.kv_budget_gb * static_cast<double>(int64_t{1} << 30));
  eo.kv_swap_dir = f.kv_swap_dir;
  eo.kv_swap_bytes = f.kv_swap_gb < 0 ? -1 : static_cast<int64_t>(f.kv_swap_gb * static_cast<double>(int64_t{1} << 30));
  eo.prefix_cache_bytes = f.prefix_cache_mb << 20;
  eo.media_cache_bytes = f.media_cache_mb << 20;
  eo.ngram_pool_bytes = f.ngram_pool_mb << 20;
  auto engine = Engine::Start(*model, eo);
  if (!engine.ok()) return ReportError(engine.status());
  srv.SetEngine(*model, std::move(engine).value());
  signals.Serving();
  std::fprintf(stderr, "[phi4mm] serving %s as '%s' (API key %s)\n", f.model.dir.c_str(), so.served_name.c_str(),
               so.api_keys.empty() ? "off" : "required");

  const int sig = signals.Wait();
  std::fprintf(stderr, "[phi4mm] %s: draining for up to %.0f s (%lld requests in flight)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", f.drain_seconds, static_cast<long long>(srv.in_flight()));
  srv.Drain(std::chrono::duration<double>(f.drain_seconds));
  srv.Stop();
  std::fprintf(stderr, "[phi4mm] stopped\n");
  return 0;
}

}  // namespace phi4mm::cli
