// The batched engine: many conversations served at once by one engine thread that owns all model
// compute. Requests are step-wise state machines (queued -> encoding -> prefilling -> decoding ->
// done); every loop iteration the scheduler
//   1. ends requests that were cancelled or whose deadline passed (their KV reservation is given
//      back at once, whatever their phase),
//   2. admits queued requests in order while fewer than max_running run and the KV they need now
//      (their prompt and one block of kv_block positions) fits the byte budget with a block to
//      spare (a request whose worst case, prompt + max new tokens, could
//      never fit the whole budget is refused at Submit, not queued), reusing the longest cached
//      prefix of an earlier request; a running request's cache grows a block at a time, and when
//      the budget has no room for that, the youngest running request is preempted: its cache is
//      swapped out to a file (kv_swap_*; or, when swapping is off or full, dropped and recomputed
//      later) and it waits at the head of the queue, to continue where it stopped,
//   3. runs one slice of encoder work (a few image crops or one Conformer block), so a new image
//      never stalls running answers for more than a slice,
//   4. runs one batched decoder step (Decoder::Step) over one row of every decoding request plus
//      up to prefill_chunk prompt rows of the oldest prefilling requests, with the lm_head once
//      over the rows that need logits, and samples each request with its own seeded sampler.
// A request's tokens do not depend on what else is in the batch (tested against Session).
// Callbacks run on the engine thread and must return quickly. While an Engine runs, it should be
// the only user of its model's thread pool.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "phi4mm/models/decoder.h"
#include "phi4mm/runtime/kv_budget.h"
#include "phi4mm/runtime/media.h"
#include "phi4mm/runtime/media_cache.h"
#include "phi4mm/runtime/prefix_cache.h"
#include "phi4mm/runtime/session.h"

namespace phi4mm {

struct EngineOptions {
  int64_t max_running = 8;             // sequences in the batch
  int64_t max_queue = 32;              // admitted-later requests waiting; Submit refuses beyond
  int64_t kv_budget_bytes = 0;         // 0 = half of the memory available when the engine starts
  int64_t kv_block = 256;              // positions a running request's cache grows by at a time
  std::string kv_swap_dir;             // where preempted caches go ("" = the temporary directory)
  int64_t kv_swap_bytes = -1;          // their limit; -1 = the KV budget's size, 0 = recompute instead
  int64_t prefill_chunk = 128;         // prompt rows per step, over all prefilling requests
  int64_t prefix_cache_bytes = int64_t{1} << 30;
  int64_t media_cache_bytes = int64_t{256} << 20;
  // Requests with speculative ngram also draft from what earlier requests' prompts and answers
  // continued the same ids with, in a table of this size (speculative.h NgramPool; 0 = off).
  int64_t ngram_pool_bytes = int64_t{16} << 20;
  // Encoder work between two decoder steps: SigLIP layers of one crop (~0.3 s each at full size
  // on 2 cores), Conformer blocks of one clip.
  int64_t vision_layers_per_slice = 2;
  int64_t speech_blocks_per_slice = 1;
  // Engine thread, after each turn of the loop that ran an encoder slice or a decoder step
  // (tests use it to slow the engine down and hold a request in its slot; tracing).
  std::function<void()> after_step;
  // Time the parts of every decode-only step (no prompt rows) into EngineStats::decode_profile: a
  // few clock reads per layer; for `phi4mm bench --step-profile`.
  bool profile_steps = false;
};

// What a request streams: final answer text as it becomes final (possibly empty), with the token
// that produced it (-1 for the closing flush).
struct StreamEvent {
  std::string_view text;
  int32_t token = -1;
  const TokenLogprobs* logprobs = nullptr;  // when the request asked for log-probabilities
};

struct RequestResult;

// Requests that ask for the same prompt (the n choices of one API call): the one submitted with
// `share_leader` publishes its prompt's KV to the prefix cache as soon as its prefill is done (or
// gives up when it ends first), and the others are admitted only after that, so they find all but
// the prompt's last position in the cache and the prompt is prefilled once. Each keeps its own
// sampler and seed. With the prefix cache off, the others prefill the prompt themselves.
struct PromptShare {
  std::atomic<bool> published{false};
};

struct EngineRequest {
  std::string prompt;            // rendered with the chat template; <|image_N|> / <|audio_N|> placeholders
  std::vector<int32_t> prompt_ids;  // or the prompt as token ids (used when `prompt` is empty; no media)
  MediaInputs media;
  PromptOptions prompt_options;  // dynamic_hd, conversation media flags (token_budget is ignored)
  GenerateOptions generate;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // What the caller holds on behalf of this request's media (a memory budget's share, say): the
  // engine lets go of it, and of the preprocessed pixels and features, once every image and clip
  // of the request is encoded (or the request ends).
  std::shared_ptr<void> media_hold;
  std::shared_ptr<PromptShare> prompt_share;  // with the other choices of the same prompt
  bool share_leader = false;                  // this one prefills the shared prompt
  // Engine thread; return false to cancel the request.
  std::function<bool(const StreamEvent&)> on_event;
  // Engine thread, before each sampling: the logits the next token is drawn from (tests, debugging).
  std::function<void(std::span<const float>)> on_logits;
  // Engine thread (or the thread stopping the engine), once the request has ended, with what
  // RequestHandle::Wait then returns: an error, or the result. Must be quick; may run before
  // Submit has returned the handle.
  std::function<void(const Status& status, const RequestResult& result)> on_done;
};

struct RequestResult {
  GenerateResult generation;         // tokens, text, finish reason
  PromptCount count;                 // prompt tokens by kind
  int64_t cached_prompt_tokens = 0;  // prompt positions reused from the prefix cache
  int64_t images_encoded = 0, audios_encoded = 0;  // encoder runs (not served from the media cache)
  // Engine-thread seconds each of those runs took (its slices summed, the interleaved decoder
  // steps left out), in the order they finished.
  std::vector<double> image_encode_seconds, audio_encode_seconds;
  double queue_seconds = 0, time_to_first_token = 0, total_seconds = 0;
};

class RequestHandle {
 public:
  struct Shared;  // the request's state as the engine thread and the handle share it
  RequestHandle() = default;
  explicit RequestHandle(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  // Ends the request within one engine step, whatever its phase; its answer so far is kept.
  void Cancel();
  bool done() const;
  // Blocks until the request has ended or `timeout` has passed; true when it has ended.
  bool WaitFor(std::chrono::milliseconds timeout) const;
  // Blocks until the request has ended. An error (a failing encoder, say) is returned as a Status.
  Result<RequestResult> Wait();

 private:
  std::shared_ptr<Shared> s_;
};

namespace engine_internal {
struct State;
}

struct EngineStats {
  int64_t running = 0, waiting = 0;
  // The same by the LoRA mode the requests run in (LoraMode order: none, vision, speech).
  std::array<int64_t, 3> running_by_mode{}, waiting_by_mode{};
  int64_t kv_reserved_bytes = 0, kv_budget_bytes = 0;
  int64_t steps = 0, batch_rows = 0, prefill_rows = 0, decode_rows = 0;
  // Speculative decoding: drafted ids verified (their rows are in decode_rows), and of them those
  // the answers took.
  int64_t drafts = 0, draft_tokens = 0, accepted_draft_tokens = 0;  // drafts: verify steps of a request
  // Of those, the drafted and taken ids that came from the n-gram pool, and the pool's size.
  int64_t pool_draft_tokens = 0, pool_accepted_tokens = 0, ngram_pool_bytes = 0;
  std::array<int64_t, 3> rows_by_mode{};  // batch rows by LoRA mode, in LoraMode order (none, vision, speech)
  // Decoder steps by rows: step_rows[i] counts the steps of at most kStepRowBounds[i] rows and more
  // than the bound before it; the last entry, the steps of more rows than the largest bound.
  static constexpr std::array<int64_t, 10> kStepRowBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::array<int64_t, kStepRowBounds.size() + 1> step_rows{};
  int64_t vision_crops = 0, speech_blocks = 0, images_encoded = 0, audios_encoded = 0;
  int64_t finished = 0, cancelled = 0, expired = 0, refused = 0;
  // Preemptions (the budget had no room for a running request's next block), and how the
  // preempted caches came back: read from swap, or recomputed. The swap space in use.
  int64_t preempted = 0, swapped_in = 0, recomputed = 0, kv_swap_bytes = 0;
  PrefixCacheStats prefix;
  MediaCacheStats media;
  // With EngineOptions::profile_steps: the decode-only steps, their rows, and their wall time by
  // part in seconds: the decoder layers' parts, the rest of the decoder step (row copies,
  // rotary tables, final norm), the lm_head over the rows, and sampling + streaming.
  struct DecodeProfile {
    int64_t steps = 0, rows = 0;
    DecoderStepTimes decoder;
    double outside_layers = 0, lm_head = 0, sampling = 0;
  } decode_profile;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Start(std::shared_ptr<const Model> model, const EngineOptions& opts = {});
  ~Engine();  // cancels whatever still runs and joins the engine thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks, preprocesses and tokenizes the request on the calling thread, then queues it. Errors:
  // InvalidArgument (bad options or media), OutOfRange (the prompt or its worst-case KV cache can
  // never fit the context or the budget), ResourceExhausted (the queue is full now).
  Result<RequestHandle> Submit(EngineRequest request);
  EngineStats stats() const;
  const EngineOptions& options() const { return opts_; }
  const Model& model() const { return *model_; }
  // KV bytes a request of `positions` positions reserves.
  int64_t KvBytesFor(int64_t positions) const;

 private:
  Engine(std::shared_ptr<const Model> model, const EngineOptions& opts);

  std::shared_ptr<const Model> model_;
  EngineOptions opts_;
  std::unique_ptr<engine_internal::State> st_;
};

}  // namespace phi4mm
