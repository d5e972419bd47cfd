// The server's Prometheus metrics (/metrics, text format 0.0.4): request, rejection and
// cancellation counters kept by the HTTP side, token counters and latency histograms fed from
// each finished request's RequestResult, and the engine's own gauges and counters read from
// EngineStats when the page is rendered. Names follow the spec (phi4mm_*); the series that routers
// and inference gateways read are also given under vLLM's names (vllm:*, metrics_vllm.cc).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "metrics_text.h"
#include "phi4mm/runtime/engine.h"

namespace phi4mm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  // One counted elsewhere: counts per bucket (not cumulative, the last for +Inf) and their sum.
  static Histogram FromCounts(std::vector<double> bounds, std::vector<uint64_t> counts, double sum);
  void Observe(double v);
  // `labels`: the series' labels (text between the braces, without "le"), or empty.
  void Render(const std::string& name, const std::string& help, MetricsText* t, const std::string& labels = "") const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

// vLLM's histogram buckets (vllm/v1/metrics/loggers.py): time to first token, inter-token
// latency, and the request latencies (end to end, queue).
std::vector<double> VllmTtftBuckets();
std::vector<double> VllmItlBuckets();
std::vector<double> VllmLatencyBuckets();

struct BuildInfo {
  std::string version, quant, kv_dtype;
  std::string model_name;  // the served name: the model_name label of the vllm: series
};

// The server's own gauges, read when /metrics is rendered.
struct ServerGauges {
  int64_t connections = 0, connections_refused = 0, connections_evicted = 0, http_timeouts = 0;
  int64_t pending_handlers = 0, body_bytes = 0;
  int64_t media_budget_bytes = 0, media_budget_used = 0, media_budget_peak = 0, media_budget_waiting = 0;
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& endpoint, int status);
  void CountRejected(const std::string& reason);
  void CountCancelled(const std::string& reason);  // disconnect | timeout | shutdown
  // A request the engine ran to its end (finished or cancelled).
  void ObserveResult(const RequestResult& r);
  void ObserveInterToken(double seconds);
  // A request whose media had to wait for the media budget.
  void CountMediaWait();
  // The recent requests' time from submission to their last token (an exponential average; a few
  // seconds before any has finished): what Retry-After is estimated from.
  double RecentRequestSeconds() const;
  // Prometheus text format 0.0.4, or OpenMetrics 1.0 (counter families named without "_total",
  // "# EOF" at the end) for a scraper that asks for it.
  std::string Render(const BuildInfo& build, const EngineStats* engine, const ServerGauges& server = {},
                     bool openmetrics = false) const;

 private:
  // The vllm:* family (metrics_vllm.cc); mu_ held.
  void RenderVllm(const std::string& model_name, const EngineStats* e, MetricsText* t) const;

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> rejected_, cancelled_;
  uint64_t prompt_text_ = 0, prompt_image_ = 0, prompt_audio_ = 0, generated_ = 0, cached_ = 0, media_waits_ = 0;
  double recent_seconds_ = 5;  // RecentRequestSeconds
  bool have_recent_ = false;
  Histogram ttft_, itl_, e2e_, queue_, image_encode_, audio_encode_;
  // The same latencies in vLLM's buckets, and finished answers by vLLM's finished_reason.
  Histogram vllm_ttft_, vllm_itl_, vllm_e2e_, vllm_queue_;
  uint64_t finished_stop_ = 0, finished_length_ = 0;
};

}  // namespace phi4mm::server
