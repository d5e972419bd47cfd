// Prometheus text rendering of the server's and the engine's counters (metrics.h).
#include "metrics.h"

#include "metrics_text.h"

#include <cstdio>

#include "phi4mm/base/process_memory.h"

namespace phi4mm::server {

namespace {

const std::vector<double> kLatencyBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
const std::vector<double> kItlBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};

}  // namespace

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

Histogram Histogram::FromCounts(std::vector<double> bounds, std::vector<uint64_t> counts, double sum) {
  Histogram h(std::move(bounds));
  h.counts_ = std::move(counts);
  h.counts_.resize(h.bounds_.size() + 1, 0);
  for (uint64_t c : h.counts_) h.n_ += c;
  h.sum_ = sum;
  return h;
}

void Histogram::Render(const std::string& name, const std::string& help, MetricsText* t, const std::string& labels) const {
  t->Header(name, "histogram", help);
  const std::string pre = labels.empty() ? "" : labels + ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    t->Line(name + "_bucket", pre + "le=\"" + MetricNumber(bounds_[i]) + "\"", static_cast<double>(cum));
  }
  t->Line(name + "_bucket", pre + "le=\"+Inf\"", static_cast<double>(n_));
  t->Line(name + "_sum", labels, sum_);
  t->Line(name + "_count", labels, static_cast<double>(n_));
}

Metrics::Metrics()
    : ttft_(kLatencyBuckets),
      itl_(kItlBuckets),
      e2e_(kLatencyBuckets),
      queue_(kLatencyBuckets),
      image_encode_(kLatencyBuckets),
      audio_encode_(kLatencyBuckets),
      vllm_ttft_(VllmTtftBuckets()),
      vllm_itl_(VllmItlBuckets()),
      vllm_e2e_(VllmLatencyBuckets()),
      vllm_queue_(VllmLatencyBuckets()) {}

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::CountRejected(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  ++rejected_[reason];
}

void Metrics::CountCancelled(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  ++cancelled_[reason];
}

void Metrics::ObserveResult(const RequestResult& r) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t image = 0, audio = 0;
  for (int64_t n : r.count.image_tokens) image += n;
  for (int64_t n : r.count.audio_tokens) audio += n;
  prompt_text_ += static_cast<uint64_t>(r.count.text_tokens);
  prompt_image_ += static_cast<uint64_t>(image);
  prompt_audio_ += static_cast<uint64_t>(audio);
  generated_ += r.generation.tokens.size();
  cached_ += static_cast<uint64_t>(r.cached_prompt_tokens);
  if (!r.generation.tokens.empty()) {
    ttft_.Observe(r.time_to_first_token);
    vllm_ttft_.Observe(r.time_to_first_token);
  }
  e2e_.Observe(r.total_seconds);
  vllm_e2e_.Observe(r.total_seconds);
  vllm_queue_.Observe(r.queue_seconds);
  const FinishReason why = r.generation.finish;
  if (why == FinishReason::kMaxTokens || why == FinishReason::kContextFull) ++finished_length_;
  else ++finished_stop_;
  recent_seconds_ = have_recent_ ? 0.9 * recent_seconds_ + 0.1 * r.total_seconds : r.total_seconds;
  have_recent_ = true;
  queue_.Observe(r.queue_seconds);
  for (double s : r.image_encode_seconds) image_encode_.Observe(s);
  for (double s : r.audio_encode_seconds) audio_encode_.Observe(s);
}

double Metrics::RecentRequestSeconds() const {
  std::lock_guard<std::mutex> l(mu_);
  return recent_seconds_;
}

void Metrics::CountMediaWait() {
  std::lock_guard<std::mutex> l(mu_);
  ++media_waits_;
}

void Metrics::ObserveInterToken(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  itl_.Observe(seconds);
  vllm_itl_.Observe(seconds);
}

std::string Metrics::Render(const BuildInfo& b, const EngineStats* e, const ServerGauges& g, bool openmetrics) const {
  MetricsText t(openmetrics);
  t.Header("phi4mm_build_info", "gauge", "Build and load configuration.");
  t.Line("phi4mm_build_info",
       "version=\"" + EscapeLabel(b.version) + "\",quant=\"" + EscapeLabel(b.quant) + "\",kv_dtype=\"" + EscapeLabel(b.kv_dtype) + "\"", 1);
  std::lock_guard<std::mutex> l(mu_);
  t.Header("phi4mm_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [k, v] : requests_)
    t.Line("phi4mm_requests_total", "endpoint=\"" + EscapeLabel(k.first) + "\",status=\"" + std::to_string(k.second) + "\"",
         static_cast<double>(v));
  t.Header("phi4mm_requests_rejected_total", "counter", "Requests refused before generation, by reason.");
  for (const auto& [k, v] : rejected_)
    t.Line("phi4mm_requests_rejected_total", "reason=\"" + EscapeLabel(k) + "\"", static_cast<double>(v));
  t.Header("phi4mm_cancelled_total", "counter", "Requests cancelled while running, by reason.");
  for (const char* reason : {"disconnect", "timeout", "shutdown"}) {
    auto it = cancelled_.find(reason);
    t.Line("phi4mm_cancelled_total", std::string("reason=\"") + reason + "\"",
         it == cancelled_.end() ? 0.0 : static_cast<double>(it->second));
  }
  t.Header("phi4mm_prompt_tokens_total", "counter", "Prompt tokens of finished requests, by kind.");
  t.Line("phi4mm_prompt_tokens_total", "kind=\"text\"", static_cast<double>(prompt_text_));
  t.Line("phi4mm_prompt_tokens_total", "kind=\"image\"", static_cast<double>(prompt_image_));
  t.Line("phi4mm_prompt_tokens_total", "kind=\"audio\"", static_cast<double>(prompt_audio_));
  t.Single("phi4mm_generation_tokens_total", "counter", "Generated tokens.", static_cast<double>(generated_));
  t.Single("phi4mm_prefix_cache_hit_tokens_total", "counter", "Prompt positions served from the prefix cache.",
         static_cast<double>(cached_));
  ttft_.Render("phi4mm_time_to_first_token_seconds", "Time from submission to the first generated token.", &t);
  itl_.Render("phi4mm_inter_token_latency_seconds", "Time between two generated tokens of one request.", &t);
  e2e_.Render("phi4mm_e2e_request_latency_seconds", "Time from submission to the end of the answer.", &t);
  queue_.Render("phi4mm_queue_time_seconds", "Time a request waited for admission.", &t);
  image_encode_.Render("phi4mm_image_encode_seconds",
                       "Engine time of one image's vision encoding (not served from the media cache).", &t);
  audio_encode_.Render("phi4mm_audio_encode_seconds",
                       "Engine time of one audio clip's speech encoding (not served from the media cache).", &t);
  if (e) {
    t.Single("phi4mm_requests_running", "gauge", "Requests in the batch.", static_cast<double>(e->running));
    t.Single("phi4mm_requests_waiting", "gauge", "Requests waiting for admission.", static_cast<double>(e->waiting));
    t.Single("phi4mm_kv_cache_bytes", "gauge", "KV cache bytes reserved by running requests.",
           static_cast<double>(e->kv_reserved_bytes));
    t.Single("phi4mm_kv_budget_bytes", "gauge", "The KV cache budget.", static_cast<double>(e->kv_budget_bytes));
    t.Single("phi4mm_engine_steps_total", "counter", "Batched decoder steps.", static_cast<double>(e->steps));
    t.Header("phi4mm_batch_rows_total", "counter", "Rows over all decoder steps, by the LoRA mode they ran in.");
    for (size_t i = 0; i < e->rows_by_mode.size(); ++i)
      t.Line("phi4mm_batch_rows_total",
           std::string("lora_mode=\"") + LoraModeName(static_cast<LoraMode>(i)) + "\"",
           static_cast<double>(e->rows_by_mode[i]));
    Histogram::FromCounts({EngineStats::kStepRowBounds.begin(), EngineStats::kStepRowBounds.end()},
                          {e->step_rows.begin(), e->step_rows.end()}, static_cast<double>(e->batch_rows))
        .Render("phi4mm_step_rows", "Rows per decoder step (decode rows and prompt chunks together).", &t);
    t.Single("phi4mm_prefill_rows_total", "counter", "Prompt rows over all decoder steps.",
           static_cast<double>(e->prefill_rows));
    t.Single("phi4mm_decode_rows_total", "counter", "Decode rows over all decoder steps.",
           static_cast<double>(e->decode_rows));
    t.Single("phi4mm_draft_tokens_total", "counter",
             "Speculative decoding: drafted tokens verified (their rows are among the decode rows).",
             static_cast<double>(e->draft_tokens));
    t.Single("phi4mm_accepted_draft_tokens_total", "counter", "Speculative decoding: drafted tokens the answers took.",
             static_cast<double>(e->accepted_draft_tokens));
    t.Single("phi4mm_ngram_pool_draft_tokens_total", "counter",
             "Speculative decoding: drafted tokens that came from the n-gram pool of earlier requests.",
             static_cast<double>(e->pool_draft_tokens));
    t.Single("phi4mm_ngram_pool_accepted_tokens_total", "counter",
             "Speculative decoding: drafted tokens from the n-gram pool that the answers took.",
             static_cast<double>(e->pool_accepted_tokens));
    t.Single("phi4mm_ngram_pool_bytes", "gauge", "Memory of the n-gram pool (allocated at its first use).",
             static_cast<double>(e->ngram_pool_bytes));
    t.Single("phi4mm_images_encoded_total", "counter", "Images run through the vision encoder.",
           static_cast<double>(e->images_encoded));
    t.Single("phi4mm_audios_encoded_total", "counter", "Clips run through the speech encoder.",
           static_cast<double>(e->audios_encoded));
    t.Single("phi4mm_media_cache_hits_total", "counter", "Images and clips served from the media cache.",
           static_cast<double>(e->media.hits));
    t.Single("phi4mm_engine_finished_total", "counter", "Requests the engine finished.", static_cast<double>(e->finished));
    t.Single("phi4mm_engine_cancelled_total", "counter", "Requests the engine ended by cancellation.",
           static_cast<double>(e->cancelled));
    t.Single("phi4mm_engine_expired_total", "counter", "Requests the engine ended at their deadline.",
           static_cast<double>(e->expired));
    t.Single("phi4mm_engine_refused_total", "counter", "Requests the engine refused at submission.",
           static_cast<double>(e->refused));
    t.Single("phi4mm_kv_preemptions_total", "counter",
           "Running requests preempted because the KV budget had no room for their next block.",
           static_cast<double>(e->preempted));
    t.Single("phi4mm_kv_swapped_in_total", "counter", "Preempted caches read back from the swap space.",
           static_cast<double>(e->swapped_in));
    t.Single("phi4mm_kv_recomputed_total", "counter", "Preempted caches recomputed (swap off or full).",
           static_cast<double>(e->recomputed));
    t.Single("phi4mm_kv_swap_bytes", "gauge", "KV bytes swapped out to files (--kv-swap-gb).",
           static_cast<double>(e->kv_swap_bytes));
    t.Single("phi4mm_prefix_cache_bytes", "gauge", "KV bytes the prefix cache holds (--prefix-cache-mb).",
           static_cast<double>(e->prefix.bytes));
    t.Single("phi4mm_prefix_cache_entries", "gauge", "Sequences the prefix cache holds.",
           static_cast<double>(e->prefix.entries));
    t.Single("phi4mm_media_cache_bytes", "gauge", "Encoder output bytes the media cache holds (--media-cache-mb).",
           static_cast<double>(e->media.bytes));
    t.Single("phi4mm_media_cache_entries", "gauge", "Images and clips the media cache holds.",
           static_cast<double>(e->media.entries));
  }
  t.Single("phi4mm_http_connections", "gauge", "Open HTTP connections.", static_cast<double>(g.connections));
  t.Single("phi4mm_http_connections_refused_total", "counter", "Connections turned away at the limits.",
         static_cast<double>(g.connections_refused));
  t.Single("phi4mm_http_connections_evicted_total", "counter",
         "Idle or slow connections closed to make room for new ones.", static_cast<double>(g.connections_evicted));
  t.Single("phi4mm_http_timeouts_total", "counter", "Connections closed by a header, body, idle or write deadline.",
         static_cast<double>(g.http_timeouts));
  t.Single("phi4mm_http_pending_handlers", "gauge", "Requests waiting for an HTTP worker.",
         static_cast<double>(g.pending_handlers));
  t.Single("phi4mm_http_body_bytes", "gauge", "Request body bytes received and not yet handled.",
         static_cast<double>(g.body_bytes));
  t.Single("phi4mm_media_budget_bytes", "gauge", "The media budget (--media-budget-mb).",
         static_cast<double>(g.media_budget_bytes));
  t.Single("phi4mm_media_budget_used_bytes", "gauge",
         "Bytes of the media budget held by requests decoding media or waiting for their encoding.",
         static_cast<double>(g.media_budget_used));
  t.Single("phi4mm_media_budget_peak_bytes", "gauge", "The most of the media budget ever held at once.",
         static_cast<double>(g.media_budget_peak));
  t.Single("phi4mm_media_budget_waiting", "gauge", "Requests waiting for the media budget.",
         static_cast<double>(g.media_budget_waiting));
  t.Single("phi4mm_media_budget_waits_total", "counter", "Requests that had to wait for the media budget.",
         static_cast<double>(media_waits_));
  RenderVllm(b.model_name, e, &t);
  t.Single("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         static_cast<double>(ResidentBytes()));
  return t.Finish();
}

}  // namespace phi4mm::server
