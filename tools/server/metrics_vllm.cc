// The vllm:* metrics: the series that vllm-router, the Gateway API Inference Extension (its model
// server protocol: waiting and running requests, KV-cache utilisation, LoRA adapters) and llm-d
// read from a vLLM worker, under vLLM's names, types, labels and buckets (vllm/v1/metrics/
// loggers.py), computed from the same engine stats and request results as the phi4mm_* series.
// Every series but vllm:lora_requests_info carries model_name (the served name) and engine="0".
// The KV cache here is the CPU budget (--kv-budget-gb): vllm:kv_cache_usage_perc is the share of it
// reserved by running requests, also given under the older vllm:gpu_cache_usage_perc.
#include <chrono>

#include "metrics.h"
#include "phi4mm/models/lora_mode.h"

namespace phi4mm::server {

std::vector<double> VllmTtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> VllmItlBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> VllmLatencyBuckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
          960.0, 1920.0, 7680.0};
}

namespace {

// The LoRA adapters (vision, speech) of the requests counted in `by_mode`, comma-separated.
std::string Adapters(const std::array<int64_t, 3>& by_mode) {
  std::string out;
  for (LoraMode m : {LoraMode::kVision, LoraMode::kSpeech}) {
    if (by_mode[static_cast<size_t>(m)] <= 0) continue;
    if (!out.empty()) out += ",";
    out += LoraModeName(m);
  }
  return out;
}

}  // namespace

void Metrics::RenderVllm(const std::string& model_name, const EngineStats* e, MetricsText* t) const {
  const std::string labels = "model_name=\"" + EscapeLabel(model_name) + "\",engine=\"0\"";
  const auto one = [&](const char* name, const char* type, const char* help, double v) {
    t->Header(name, type, help);
    t->Line(name, labels, v);
  };
  if (e) {
    one("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
        static_cast<double>(e->running));
    one("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
        static_cast<double>(e->waiting));
    const double usage = e->kv_budget_bytes > 0 ? static_cast<double>(e->kv_reserved_bytes) /
                                                      static_cast<double>(e->kv_budget_bytes)
                                                : 0.0;
    one("vllm:kv_cache_usage_perc", "gauge",
        "KV-cache usage. 1 means 100 percent usage (of the CPU KV budget, --kv-budget-gb).", usage);
    one("vllm:gpu_cache_usage_perc", "gauge",
        "KV-cache usage under vLLM's older name: the CPU KV budget's share in use (1 = all).", usage);
    one("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
        static_cast<double>(e->prefix.query_tokens));
    one("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
        static_cast<double>(e->prefix.hit_tokens));
    one("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
        static_cast<double>(e->preempted));
    one("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
        static_cast<double>(e->drafts));
    one("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
        static_cast<double>(e->draft_tokens));
    one("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
        static_cast<double>(e->accepted_draft_tokens));
    // GAIE's model server protocol: the adapters of running and waiting requests; the value is when
    // this was read (Unix seconds). Both adapters can run in one batch.
    t->Header("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    t->Line("vllm:lora_requests_info",
            "running_lora_adapters=\"" + Adapters(e->running_by_mode) + "\",max_lora=\"2\",waiting_lora_adapters=\"" +
                Adapters(e->waiting_by_mode) + "\"",
            now);
  }
  one("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
      static_cast<double>(prompt_text_ + prompt_image_ + prompt_audio_));
  one("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
      static_cast<double>(generated_));
  t->Header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  uint64_t aborted = 0;
  for (const auto& [reason, n] : cancelled_) aborted += n;
  t->Line("vllm:request_success_total", labels + ",finished_reason=\"stop\"", static_cast<double>(finished_stop_));
  t->Line("vllm:request_success_total", labels + ",finished_reason=\"length\"", static_cast<double>(finished_length_));
  t->Line("vllm:request_success_total", labels + ",finished_reason=\"abort\"", static_cast<double>(aborted));
  vllm_ttft_.Render("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", t, labels);
  vllm_itl_.Render("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", t, labels);
  vllm_e2e_.Render("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", t, labels);
  vllm_queue_.Render("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", t,
                     labels);
}

}  // namespace phi4mm::server
