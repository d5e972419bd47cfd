// GET /health, /v1/health, /v1/models, /v1/models/{id} and /metrics, answered on the HTTP layer's
// I/O thread. Health answers from atomics only (never through the engine or a worker), so it stays
// fast while the engine and the workers are busy.
#include <ctime>

#include "http/multipart.h"
#include "json_fields.h"
#include "server_internal.h"

namespace phi4mm::server {

void InstallInfoRoutes(Server::Impl& s) {
  using Run = http::Server::Run;
  auto health = [&s](http::Request&, http::Exchange ex) {
    if (s.draining) return s.SendError(ex, Unavailable("draining", 5));
    if (!s.ready) return s.SendError(ex, Unavailable("Loading model", 5));
    http::Response r;
    r.body = R"({"status":"ok"})";
    ex.Send(std::move(r));
  };
  s.http.Route("GET", "/health", Run::kInline, health);
  s.http.Route("GET", "/v1/health", Run::kInline, health);

  static const int64_t started = static_cast<int64_t>(std::time(nullptr));
  auto model_entry = [&s]() {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    return Json{{"id", s.opts.served_name},
                {"object", "model"},
                {"created", started},
                {"owned_by", "phi4mm"},
                {"max_model_len", s.model ? s.model->context_length() : 0}};
  };
  s.http.Route("GET", "/v1/models", Run::kInline, [model_entry](http::Request&, http::Exchange ex) {
    http::Response r;
    r.body = Json{{"object", "list"}, {"data", Json::array({model_entry()})}}.dump();
    ex.Send(std::move(r));
  });
  s.http.RoutePrefix("GET", "/v1/models/", Run::kInline, [&s, model_entry](http::Request& req, http::Exchange ex) {
    const std::string id = http::PercentDecode(req.path.substr(std::string_view("/v1/models/").size()));
    if (id != s.opts.served_name)
      return s.SendError(ex, ApiError{404, "not_found_error", "no model named '" + id + "'; this server serves '" +
                                                                  s.opts.served_name + "'",
                                      "model", "model_not_found", 0});
    http::Response r;
    r.body = model_entry().dump();
    ex.Send(std::move(r));
  });

  s.http.Route("GET", "/metrics", Run::kInline, [&s](http::Request& req, http::Exchange ex) {
    std::optional<EngineStats> st;
    {
      std::shared_lock<std::shared_mutex> l(s.model_mu);
      if (s.engine) st = s.engine->stats();
    }
    http::Response r;
    // A scraper that asks for OpenMetrics (Prometheus does, first) gets it.
    const bool om = req.header("accept").find("application/openmetrics-text") != std::string_view::npos;
    r.content_type = om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                        : "text/plain; version=0.0.4; charset=utf-8";
    const http::Stats hs = s.http.stats();
    ServerGauges g;
    g.connections = hs.connections;
    g.connections_refused = hs.connections_refused;
    g.connections_evicted = hs.connections_evicted;
    g.http_timeouts = hs.timeouts;
    g.pending_handlers = hs.pending;
    g.body_bytes = hs.buffered_body_bytes;
    g.media_budget_bytes = s.media_budget.limit();
    g.media_budget_used = s.media_budget.used();
    g.media_budget_peak = s.media_budget.peak();
    g.media_budget_waiting = s.media_budget.waiting();
    BuildInfo build = s.opts.build;
    build.model_name = s.opts.served_name;
    r.body = s.metrics.Render(build, st ? &*st : nullptr, g, om);
    ex.Send(std::move(r));
  });
}

}  // namespace phi4mm::server
