// GET /health, /v1/health, /v1/models, /v1/models/{id} and /metrics. Health answers from atomics
// only (never through the engine), so it stays fast while the engine is busy.
#include <ctime>

#include "json_fields.h"
#include "server_internal.h"

namespace phi4mm::server {

void InstallInfoRoutes(Server::Impl& s) {
  auto health = [&s](const httplib::Request&, httplib::Response& res) {
    if (s.draining) return s.SendError(res, Unavailable("draining", 5));
    if (!s.ready) return s.SendError(res, Unavailable("Loading model", 5));
    res.set_content(R"({"status":"ok"})", "application/json");
  };
  s.http.Get("/health", health);
  s.http.Get("/v1/health", health);

  static const int64_t started = static_cast<int64_t>(std::time(nullptr));
  auto model_entry = [&s]() {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    return Json{{"id", s.opts.served_name},
                {"object", "model"},
                {"created", started},
                {"owned_by", "phi4mm"},
                {"max_model_len", s.model ? s.model->context_length() : 0}};
  };
  s.http.Get("/v1/models", [model_entry](const httplib::Request&, httplib::Response& res) {
    res.set_content(Json{{"object", "list"}, {"data", Json::array({model_entry()})}}.dump(), "application/json");
  });
  s.http.Get(R"(/v1/models/(.+))", [&s, model_entry](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != s.opts.served_name)
      return s.SendError(res, ApiError{404, "not_found_error", "no model named '" + id + "'; this server serves '" +
                                                                   s.opts.served_name + "'",
                                       "model", "model_not_found", 0});
    res.set_content(model_entry().dump(), "application/json");
  });

  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    std::optional<EngineStats> st;
    {
      std::shared_lock<std::shared_mutex> l(s.model_mu);
      if (s.engine) st = s.engine->stats();
    }
    res.set_content(s.metrics.Render(s.opts.build, st ? &*st : nullptr), "text/plain; version=0.0.4");
  });
}

}  // namespace phi4mm::server
