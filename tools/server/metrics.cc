// Prometheus text rendering of the server's and the engine's counters (metrics.h).
#include "metrics.h"

#include <charconv>
#include <cstdio>

#include "phi4mm/base/process_memory.h"

namespace phi4mm::server {

namespace {

// The shortest text that reads back as `v` ("0.01", not "0.010000000000000000208").
std::string Num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// OpenMetrics names a counter family without its samples' "_total" (text format 0.0.4 names it
// with). Set per rendering (Render holds the lock).
thread_local bool g_openmetrics = false;

void Header(std::string* out, const std::string& name, const char* type, const std::string& help) {
  std::string family = name;
  if (g_openmetrics && std::string_view(type) == "counter" && family.size() > 6 &&
      family.compare(family.size() - 6, 6, "_total") == 0)
    family.resize(family.size() - 6);
  *out += "# HELP " + family + " " + help + "\n# TYPE " + family + " " + type + "\n";
}

void Line(std::string* out, const std::string& name, const std::string& labels, double v) {
  *out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + Num(v) + "\n";
}

void Single(std::string* out, const std::string& name, const char* type, const std::string& help, double v) {
  Header(out, name, type, help);
  Line(out, name, "", v);
}

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

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  Header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    Line(out, name + "_bucket", "le=\"" + Num(bounds_[i]) + "\"", static_cast<double>(cum));
  }
  Line(out, name + "_bucket", "le=\"+Inf\"", static_cast<double>(n_));
  Line(out, name + "_sum", "", sum_);
  Line(out, name + "_count", "", static_cast<double>(n_));
}

Metrics::Metrics()
    : ttft_(kLatencyBuckets),
      itl_(kItlBuckets),
      e2e_(kLatencyBuckets),
      queue_(kLatencyBuckets),
      image_encode_(kLatencyBuckets),
      audio_encode_(kLatencyBuckets) {}

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
  if (!r.generation.tokens.empty()) ttft_.Observe(r.time_to_first_token);
  e2e_.Observe(r.total_seconds);
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
}

std::string Metrics::Render(const BuildInfo& b, const EngineStats* e, const ServerGauges& g, bool openmetrics) const {
  g_openmetrics = openmetrics;
  std::string out;
  Header(&out, "phi4mm_build_info", "gauge", "Build and load configuration.");
  Line(&out, "phi4mm_build_info",
       "version=\"" + Escape(b.version) + "\",quant=\"" + Escape(b.quant) + "\",kv_dtype=\"" + Escape(b.kv_dtype) + "\"", 1);
  std::lock_guard<std::mutex> l(mu_);
  Header(&out, "phi4mm_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [k, v] : requests_)
    Line(&out, "phi4mm_requests_total", "endpoint=\"" + Escape(k.first) + "\",status=\"" + std::to_string(k.second) + "\"",
         static_cast<double>(v));
  Header(&out, "phi4mm_requests_rejected_total", "counter", "Requests refused before generation, by reason.");
  for (const auto& [k, v] : rejected_)
    Line(&out, "phi4mm_requests_rejected_total", "reason=\"" + Escape(k) + "\"", static_cast<double>(v));
  Header(&out, "phi4mm_cancelled_total", "counter", "Requests cancelled while running, by reason.");
  for (const char* reason : {"disconnect", "timeout", "shutdown"}) {
    auto it = cancelled_.find(reason);
    Line(&out, "phi4mm_cancelled_total", std::string("reason=\"") + reason + "\"",
         it == cancelled_.end() ? 0.0 : static_cast<double>(it->second));
  }
  Header(&out, "phi4mm_prompt_tokens_total", "counter", "Prompt tokens of finished requests, by kind.");
  Line(&out, "phi4mm_prompt_tokens_total", "kind=\"text\"", static_cast<double>(prompt_text_));
  Line(&out, "phi4mm_prompt_tokens_total", "kind=\"image\"", static_cast<double>(prompt_image_));
  Line(&out, "phi4mm_prompt_tokens_total", "kind=\"audio\"", static_cast<double>(prompt_audio_));
  Single(&out, "phi4mm_generation_tokens_total", "counter", "Generated tokens.", static_cast<double>(generated_));
  Single(&out, "phi4mm_prefix_cache_hit_tokens_total", "counter", "Prompt positions served from the prefix cache.",
         static_cast<double>(cached_));
  ttft_.Render("phi4mm_time_to_first_token_seconds", "Time from submission to the first generated token.", &out);
  itl_.Render("phi4mm_inter_token_latency_seconds", "Time between two generated tokens of one request.", &out);
  e2e_.Render("phi4mm_e2e_request_latency_seconds", "Time from submission to the end of the answer.", &out);
  queue_.Render("phi4mm_queue_time_seconds", "Time a request waited for admission.", &out);
  image_encode_.Render("phi4mm_image_encode_seconds",
                       "Engine time of one image's vision encoding (not served from the media cache).", &out);
  audio_encode_.Render("phi4mm_audio_encode_seconds",
                       "Engine time of one audio clip's speech encoding (not served from the media cache).", &out);
  if (e) {
    Single(&out, "phi4mm_requests_running", "gauge", "Requests in the batch.", static_cast<double>(e->running));
    Single(&out, "phi4mm_requests_waiting", "gauge", "Requests waiting for admission.", static_cast<double>(e->waiting));
    Single(&out, "phi4mm_kv_cache_bytes", "gauge", "KV cache bytes reserved by running requests.",
           static_cast<double>(e->kv_reserved_bytes));
    Single(&out, "phi4mm_kv_budget_bytes", "gauge", "The KV cache budget.", static_cast<double>(e->kv_budget_bytes));
    Single(&out, "phi4mm_engine_steps_total", "counter", "Batched decoder steps.", static_cast<double>(e->steps));
    Header(&out, "phi4mm_batch_rows_total", "counter", "Rows over all decoder steps, by the LoRA mode they ran in.");
    for (size_t i = 0; i < e->rows_by_mode.size(); ++i)
      Line(&out, "phi4mm_batch_rows_total",
           std::string("lora_mode=\"") + LoraModeName(static_cast<LoraMode>(i)) + "\"",
           static_cast<double>(e->rows_by_mode[i]));
    Histogram::FromCounts({EngineStats::kStepRowBounds.begin(), EngineStats::kStepRowBounds.end()},
                          {e->step_rows.begin(), e->step_rows.end()}, static_cast<double>(e->batch_rows))
        .Render("phi4mm_step_rows", "Rows per decoder step (decode rows and prompt chunks together).", &out);
    Single(&out, "phi4mm_prefill_rows_total", "counter", "Prompt rows over all decoder steps.",
           static_cast<double>(e->prefill_rows));
    Single(&out, "phi4mm_decode_rows_total", "counter", "Decode rows over all decoder steps.",
           static_cast<double>(e->decode_rows));
    Single(&out, "phi4mm_images_encoded_total", "counter", "Images run through the vision encoder.",
           static_cast<double>(e->images_encoded));
    Single(&out, "phi4mm_audios_encoded_total", "counter", "Clips run through the speech encoder.",
           static_cast<double>(e->audios_encoded));
    Single(&out, "phi4mm_media_cache_hits_total", "counter", "Images and clips served from the media cache.",
           static_cast<double>(e->media.hits));
    Single(&out, "phi4mm_engine_finished_total", "counter", "Requests the engine finished.", static_cast<double>(e->finished));
    Single(&out, "phi4mm_engine_cancelled_total", "counter", "Requests the engine ended by cancellation.",
           static_cast<double>(e->cancelled));
    Single(&out, "phi4mm_engine_expired_total", "counter", "Requests the engine ended at their deadline.",
           static_cast<double>(e->expired));
    Single(&out, "phi4mm_engine_refused_total", "counter", "Requests the engine refused at submission.",
           static_cast<double>(e->refused));
    Single(&out, "phi4mm_kv_preemptions_total", "counter",
           "Running requests preempted because the KV budget had no room for their next block.",
           static_cast<double>(e->preempted));
    Single(&out, "phi4mm_kv_swapped_in_total", "counter", "Preempted caches read back from the swap space.",
           static_cast<double>(e->swapped_in));
    Single(&out, "phi4mm_kv_recomputed_total", "counter", "Preempted caches recomputed (swap off or full).",
           static_cast<double>(e->recomputed));
    Single(&out, "phi4mm_kv_swap_bytes", "gauge", "KV bytes swapped out to files (--kv-swap-gb).",
           static_cast<double>(e->kv_swap_bytes));
    Single(&out, "phi4mm_prefix_cache_bytes", "gauge", "KV bytes the prefix cache holds (--prefix-cache-mb).",
           static_cast<double>(e->prefix.bytes));
    Single(&out, "phi4mm_prefix_cache_entries", "gauge", "Sequences the prefix cache holds.",
           static_cast<double>(e->prefix.entries));
    Single(&out, "phi4mm_media_cache_bytes", "gauge", "Encoder output bytes the media cache holds (--media-cache-mb).",
           static_cast<double>(e->media.bytes));
    Single(&out, "phi4mm_media_cache_entries", "gauge", "Images and clips the media cache holds.",
           static_cast<double>(e->media.entries));
  }
  Single(&out, "phi4mm_http_connections", "gauge", "Open HTTP connections.", static_cast<double>(g.connections));
  Single(&out, "phi4mm_http_connections_refused_total", "counter", "Connections turned away at the limits.",
         static_cast<double>(g.connections_refused));
  Single(&out, "phi4mm_http_connections_evicted_total", "counter",
         "Idle or slow connections closed to make room for new ones.", static_cast<double>(g.connections_evicted));
  Single(&out, "phi4mm_http_timeouts_total", "counter", "Connections closed by a header, body, idle or write deadline.",
         static_cast<double>(g.http_timeouts));
  Single(&out, "phi4mm_http_pending_handlers", "gauge", "Requests waiting for an HTTP worker.",
         static_cast<double>(g.pending_handlers));
  Single(&out, "phi4mm_http_body_bytes", "gauge", "Request body bytes received and not yet handled.",
         static_cast<double>(g.body_bytes));
  Single(&out, "phi4mm_media_budget_bytes", "gauge", "The media budget (--media-budget-mb).",
         static_cast<double>(g.media_budget_bytes));
  Single(&out, "phi4mm_media_budget_used_bytes", "gauge",
         "Bytes of the media budget held by requests decoding media or waiting for their encoding.",
         static_cast<double>(g.media_budget_used));
  Single(&out, "phi4mm_media_budget_peak_bytes", "gauge", "The most of the media budget ever held at once.",
         static_cast<double>(g.media_budget_peak));
  Single(&out, "phi4mm_media_budget_waiting", "gauge", "Requests waiting for the media budget.",
         static_cast<double>(g.media_budget_waiting));
  Single(&out, "phi4mm_media_budget_waits_total", "counter", "Requests that had to wait for the media budget.",
         static_cast<double>(media_waits_));
  Single(&out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         static_cast<double>(ResidentBytes()));
  if (openmetrics) out += "# EOF\n";
  g_openmetrics = false;
  return out;
}

}  // namespace phi4mm::server
