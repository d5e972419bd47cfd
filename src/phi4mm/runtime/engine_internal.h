// Internals of the batched engine shared by its API side (engine.cc: Submit, handles, stats) and
// its engine thread (scheduler.cc): a request's state machine (Seq) and the engine's state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "phi4mm/runtime/sequence.h"
#include "phi4mm/runtime/engine.h"
#include "phi4mm/runtime/kv_swap.h"
#include "phi4mm/runtime/schedule.h"

namespace phi4mm {

using Clock = std::chrono::steady_clock;

struct RequestHandle::Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> cancel{false};
  Status status;
  RequestResult result;
  std::function<void()> wake;  // nudges the engine thread
  std::function<void(const Status&, const RequestResult&)> on_done;  // EngineRequest::on_done
  // Marks the request done, wakes its waiters, then runs on_done (outside the lock) and lets go of
  // it: what it holds (a server's writer, which holds this request's handle) must not keep this
  // state alive in a cycle.
  void MarkDone() {
    {
      std::lock_guard<std::mutex> l(mu);
      done = true;
    }
    cv.notify_all();
    std::function<void(const Status&, const RequestResult&)> f = std::move(on_done);
    on_done = nullptr;
    if (f) f(status, result);
  }
};

namespace engine_internal {
using schedule::Phase;

struct Seq {
  std::shared_ptr<RequestHandle::Shared> shared;
  EngineRequest req;
  PreprocessedPrompt prompt;
  std::vector<std::shared_ptr<const ProcessedImage>> images;
  std::vector<Digest> image_keys, audio_keys;
  MediaRows media;                  // features per item (null until encoded or found), rows per position
  std::vector<uint64_t> keys;       // per prompt position (prefix cache)
  std::vector<int32_t> tokens;      // prompt + generated
  int64_t positions = 0;            // KV positions reserved now (the cache's room)
  int64_t max_positions = 0;        // the most it can need: prompt + max new tokens, within the context
  SwappedKv swapped;                // the cache while the request is preempted (empty: recompute)
  int64_t preemptions = 0;
  Phase phase = Phase::kQueued;
  KvCache cache;
  KvReservation reservation;
  bool long_rope = false;
  // Encoder work still to do for this request: (kind, index) in order, and the running job.
  std::deque<std::pair<MediaRows::Kind, int32_t>> to_encode;
  std::variant<std::monostate, VisionEncodeJob, SpeechEncodeJob> job;
  double job_seconds = 0;  // engine-thread time the running job's slices took so far
  std::optional<Sequence> answer;  // the answer's token loop: sampler, constraint, stops, text, draft
  RequestResult result;           // result.generation is filled from `answer` when the request ends
  Clock::time_point submitted, admitted, first_token;
  int64_t admission = 0;  // the latest admission's number (preemption takes the latest first)
  bool has_first_token = false;
  bool finished = false;
};

struct State {
  explicit State(const EngineOptions& o)
      : budget(o.kv_budget_bytes),
        swap(o.kv_swap_dir, o.kv_swap_bytes < 0 ? o.kv_budget_bytes : o.kv_swap_bytes),
        prefix(o.prefix_cache_bytes),
        media(o.media_cache_bytes),
        ngram_pool(o.ngram_pool_bytes) {}
  KvBudget budget;
  KvSwap swap;  // engine thread only
  PrefixCache prefix;
  MediaCache media;
  mutable std::mutex mu;  // guards incoming, stop, counters below
  std::condition_variable cv;
  std::deque<std::unique_ptr<Seq>> incoming;
  bool stop = false;
  bool nudged = false;   // a handle was cancelled: re-check without waiting
  EngineStats counters;  // engine-thread counters, copied under mu
  // Engine thread only.
  std::deque<std::unique_ptr<Seq>> waiting;
  std::vector<std::unique_ptr<Seq>> running;
  DecoderScratch scratch;
  std::vector<float> embeds, hidden, logits;
  std::vector<int32_t> ids;  // a verify step's rows: the request's last id and its draft
  StepCosts step_costs;      // decode-only steps, for the draft tuners
  NgramPool ngram_pool;      // drafts learnt from finished requests (speculative ngram)
  int64_t admissions = 0;
  // While a step delivers its tokens, the requests it completes are told so only after the step's
  // counters are in (so a caller that waits for its answers and then reads stats() sees the step).
  bool defer_done = false;
  std::vector<std::shared_ptr<RequestHandle::Shared>> done_later;
  std::thread thread;
};

void Loop(const Model& model, const EngineOptions& opts, State& st);

}  // namespace engine_internal

}  // namespace phi4mm
