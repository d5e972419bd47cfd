// `phi4mm serve`: the OpenAI-compatible HTTP server (tools/server) over the batched engine. Binds
// first (so /health answers 503 "Loading model" while the checkpoint loads), prints
// "listening on http://HOST:PORT", loads (the vision and speech towers too, unless --lazy-towers),
// opens the API, then waits for SIGTERM/SIGINT: stop
// admitting, let running answers finish for --drain-seconds, cancel the rest, exit 0.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <filesystem>

#include "server/server.h"
#include "cli_common.h"

namespace phi4mm::cli {

void ServeFlags::Register(CLI::App* app) {
  model.Register(app);
  app->add_option("--host", host, "Address to listen on (loopback by default; put a reverse proxy in front to expose it)")
      ->capture_default_str();
  app->add_option("--port", port, "Port; 0 picks a free one (printed)")->capture_default_str();
  app->add_option("--api-key", api_keys, "Require Authorization: Bearer KEY (repeatable; prefer --api-key-file or "
                                         "PHI4MM_API_KEY, which stay out of the process list)");
  app->add_option("--api-key-file", api_key_file, "File with one API key per line");
  app->add_option("--alias", alias, "Model name served in /v1/models and answers (default: the folder's name)");
  app->add_option("--max-running", max_running, "Sequences decoded together")->capture_default_str();
  app->add_option("--max-queue", max_queue, "Requests waiting for admission before 429")->capture_default_str();
  app->add_option("--kv-budget-gb", kv_budget_gb, "KV-cache budget in GiB; 0 = half the available memory")
      ->capture_default_str();
  app->add_option("--prefill-chunk", prefill_chunk, "Prompt rows per engine step")->capture_default_str();
  app->add_option("--max-body-mb", max_body_mb, "Largest request body (413 beyond)")->capture_default_str();
  app->add_option("--max-media-mb", max_media_mb, "Largest image or audio item, encoded (413 beyond)")
      ->capture_default_str();
  app->add_option("--max-images", max_images, "Images per request")->capture_default_str();
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

int ServeCommand(const ServeFlags& f) {
  if (f.max_body_mb < 1 || f.max_media_mb < 1 || f.max_images < 0 || f.max_audios < 0 || f.max_image_pixels < 1 ||
      f.max_audio_seconds < 1 || f.max_audio_seconds > kMaxAudioSeconds || f.request_timeout <= 0 ||
      f.drain_seconds < 0 || f.dynamic_hd < 0 || f.max_dynamic_hd < 0 || f.default_max_tokens < 1)
    return ReportError(InvalidArgument("serve limits must be positive (and --max-audio-seconds at most " +
                                       std::to_string(kMaxAudioSeconds) + ")"));
  auto keys = ApiKeys(f);
  if (!keys.ok()) return ReportError(keys.status());
  if (!f.media_dir.empty() && !std::filesystem::is_directory(f.media_dir))
    return ReportError(InvalidArgument("--media-dir " + f.media_dir + " is not a folder"));

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
  so.limits.dynamic_hd = f.dynamic_hd;
  so.limits.max_dynamic_hd = f.max_dynamic_hd;
  so.limits.default_max_tokens = f.default_max_tokens;
  so.max_body_bytes = f.max_body_mb << 20;
  so.request_timeout_seconds = f.request_timeout;
  so.sse_ping_seconds = f.sse_ping_seconds;
  so.http_threads = static_cast<int>(f.max_running + f.max_queue + 8);
  so.metrics_public = f.metrics_public;
  so.build = {PHI4MM_VERSION_STRING, f.model.quant, f.model.kv_dtype};

  // Signals go to the waiting thread below only (every thread started from here inherits the mask).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::Server srv(so);
  auto port = srv.Start();
  if (!port.ok()) return ReportError(port.status());
  std::printf("listening on http://%s:%d\n", f.host.c_str(), *port);
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
  auto engine = Engine::Start(*model, eo);
  if (!engine.ok()) return ReportError(engine.status());
  srv.SetEngine(*model, std::move(engine).value());
  std::fprintf(stderr, "[phi4mm] serving %s as '%s' (API key %s)\n", f.model.dir.c_str(), so.served_name.c_str(),
               so.api_keys.empty() ? "off" : "required");

  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "[phi4mm] %s: draining for up to %.0f s (%lld requests in flight)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", f.drain_seconds, static_cast<long long>(srv.in_flight()));
  srv.Drain(std::chrono::duration<double>(f.drain_seconds));
  srv.Stop();
  std::fprintf(stderr, "[phi4mm] stopped\n");
  return 0;
}

}  // namespace phi4mm::cli
