// The batched engine's API side: starting and stopping the engine thread, Submit (validation,
// preprocessing, tokenization, media content keys, the KV worst case), request handles, stats.
#include "phi4mm/runtime/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "phi4mm/runtime/engine_internal.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm {

namespace {

// Position key of row `row` of a media item with content digest `d`: the high bit keeps it apart
// from every token id.
uint64_t MediaRowKey(const Digest& d, int64_t row) {
  uint64_t k = 0;
  std::memcpy(&k, d.data(), sizeof(k));
  k ^= static_cast<uint64_t>(row + 1) * 0x9E3779B97F4A7C15ull;
  return k | (uint64_t{1} << 63);
}

int64_t DefaultKvBudget() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t{4} << 30;
  return static_cast<int64_t>(pages) * page / 2;
}
}  // namespace

// ---- request handle ------------------------------------------------------------------------

void RequestHandle::Cancel() {
  if (!s_) return;
  s_->cancel = true;
  if (s_->wake) s_->wake();
}

bool RequestHandle::done() const {
  if (!s_) return true;
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->done;
}

bool RequestHandle::WaitFor(std::chrono::milliseconds timeout) const {
  if (!s_) return true;
  std::unique_lock<std::mutex> l(s_->mu);
  return s_->cv.wait_for(l, timeout, [&] { return s_->done; });
}

Result<RequestResult> RequestHandle::Wait() {
  if (!s_) return InvalidArgument("waiting on an empty request handle");
  std::unique_lock<std::mutex> l(s_->mu);
  s_->cv.wait(l, [&] { return s_->done; });
  if (!s_->status.ok()) return s_->status;
  return s_->result;
}

using engine_internal::Seq;
using engine_internal::State;

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions& opts) : model_(std::move(model)), opts_(opts) {
  if (opts_.kv_budget_bytes <= 0) opts_.kv_budget_bytes = DefaultKvBudget();
  st_ = std::make_unique<State>(opts_);
}

Result<std::unique_ptr<Engine>> Engine::Start(std::shared_ptr<const Model> model, const EngineOptions& opts) {
  if (!model) return InvalidArgument("engine needs a loaded model");
  if (opts.max_running < 1) return InvalidArgument("max running sequences must be >= 1");
  if (opts.max_queue < 0) return InvalidArgument("max queued requests must be >= 0");
  if (opts.prefill_chunk < 1) return InvalidArgument("prefill chunk must be >= 1 position");
  if (opts.kv_block < 1) return InvalidArgument("the KV block must be >= 1 position");
  if (opts.vision_layers_per_slice < 1 || opts.speech_blocks_per_slice < 1)
    return InvalidArgument("encoder slices must hold at least one crop / block");
  if (opts.prefix_cache_bytes < 0 || opts.media_cache_bytes < 0 || opts.kv_budget_bytes < 0)
    return InvalidArgument("cache and budget sizes must be >= 0");
  std::unique_ptr<Engine> e(new Engine(std::move(model), opts));
  Engine* p = e.get();
  e->st_->thread = std::thread([p] { engine_internal::Loop(*p->model_, p->opts_, *p->st_); });
  return e;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> l(st_->mu);
    st_->stop = true;
  }
  st_->cv.notify_all();
  if (st_->thread.joinable()) st_->thread.join();
}

int64_t Engine::KvBytesFor(int64_t positions) const { return positions * model_->decoder().kv_bytes_per_token(); }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> l(st_->mu);
  EngineStats s = st_->counters;
  s.kv_reserved_bytes = st_->budget.reserved();
  s.kv_budget_bytes = st_->budget.limit();
  s.prefix = st_->prefix.stats();
  s.kv_swap_bytes = st_->swap.used();
  s.media = st_->media.stats();
  return s;
}

Result<RequestHandle> Engine::Submit(EngineRequest request) {
  const Model& m = *model_;
  PHI4MM_RETURN_IF_ERROR(request.generate.Validate(m.embedding().vocab_size()));
  PromptOptions po = request.prompt_options;
  po.token_budget = -1;
  auto seq = std::make_unique<Seq>();
  const int64_t ctx = m.context_length();
  if (request.prompt.empty() && !request.prompt_ids.empty()) {
    if (!request.media.empty()) return InvalidArgument("media need a text prompt with their placeholders");
    const int64_t vocab = m.embedding().vocab_size();
    for (int32_t id : request.prompt_ids)
      if (id < 0 || id >= vocab || id == kImageTokenId || id == kAudioTokenId)
        return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ") or a media placeholder");
    if (static_cast<int64_t>(request.prompt_ids.size()) > ctx)
      return OutOfRange("the prompt needs " + std::to_string(request.prompt_ids.size()) +
                        " tokens but the model's context holds " + std::to_string(ctx));
    seq->prompt.ids = std::move(request.prompt_ids);
    seq->prompt.count.text_tokens = seq->prompt.count.total_tokens = static_cast<int64_t>(seq->prompt.ids.size());
    seq->prompt.mode = LoraModeForInputs(po.conversation_has_image, po.conversation_has_audio);
    seq->prompt.audio_with_image = po.conversation_has_image;
  } else {
    auto pre = PreprocessPrompt(m.config(), m.tokenizer(), request.prompt, request.media, po, ctx);
    if (!pre.ok()) return pre.status();
    seq->prompt = std::move(pre).value();
  }
  const int64_t n = static_cast<int64_t>(seq->prompt.ids.size());
  if (n == 0) return InvalidArgument("the prompt is empty");
  seq->max_positions = std::min(ctx, n + request.generate.max_new_tokens);
  const int64_t need = KvBytesFor(seq->max_positions);
  if (need > st_->budget.limit()) {
    std::lock_guard<std::mutex> l(st_->mu);
    ++st_->counters.refused;
    return OutOfRange("the request may need " + std::to_string(seq->max_positions) + " positions (" + std::to_string(n) +
                      " prompt + " + std::to_string(seq->max_positions - n) + " new tokens) = " +
                      std::to_string(need >> 20) + " MiB of KV cache, but the engine's whole KV budget is " +
                      std::to_string(st_->budget.limit() >> 20) +
                      " MiB; ask for fewer new tokens, shorten the prompt, or raise the KV budget");
  }

  // Media: content keys, per-position rows and keys.
  const ModelConfig& cfg = m.config();
  const int64_t dyn = seq->prompt.dynamic_hd;
  for (const Image& im : request.media.images)
    seq->image_keys.push_back(ImageFeatureKey(im, dyn, cfg.vision.crop_size, cfg.vision.patch_size));
  for (const AudioClip& a : request.media.audios)
    seq->audio_keys.push_back(AudioFeatureKey(a, seq->prompt.audio_with_image));
  for (ProcessedImage& pi : seq->prompt.images)
    seq->images.push_back(std::make_shared<const ProcessedImage>(std::move(pi)));
  seq->prompt.images.clear();
  const auto& pc = seq->prompt.count;
  seq->media.Append(seq->prompt.ids, std::vector<MediaRows::Features>(seq->images.size()), pc.image_tokens,
                    std::vector<MediaRows::Features>(seq->prompt.audios.size()), pc.audio_tokens);
  seq->keys.resize(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    const MediaRows::Ref& r = seq->media.at[p];
    seq->keys[p] = r.kind == MediaRows::kToken ? static_cast<uint32_t>(seq->prompt.ids[p])
                   : MediaRowKey(r.kind == MediaRows::kImage ? seq->image_keys[r.index] : seq->audio_keys[r.index], r.row);
  }
  request.media = MediaInputs{};  // decoded pixels and samples are no longer needed
  seq->tokens = seq->prompt.ids;
  seq->answer.emplace(m, request.generate, static_cast<size_t>(n));
  seq->result.count = seq->prompt.count;
  seq->req = std::move(request);
  seq->submitted = Clock::now();
  seq->shared = std::make_shared<RequestHandle::Shared>();
  seq->shared->on_done = std::move(seq->req.on_done);
  State* st = st_.get();
  seq->shared->wake = [st] {
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->nudged = true;
    }
    st->cv.notify_all();
  };

  RequestHandle h(seq->shared);
  {
    std::lock_guard<std::mutex> l(st_->mu);
    if (st_->stop) return Cancelled("the engine is shutting down");
    const int64_t queued = static_cast<int64_t>(st_->incoming.size()) + st_->counters.waiting;  // not yet admitted
    if (queued >= opts_.max_queue + opts_.max_running - st_->counters.running) {
      ++st_->counters.refused;
      return ResourceExhausted("the engine is busy: " + std::to_string(st_->counters.running) + " requests running and " +
                               std::to_string(queued) + " waiting (limit " + std::to_string(opts_.max_queue) +
                               "); retry later");
    }
    st_->incoming.push_back(std::move(seq));
  }
  st_->cv.notify_all();
  return h;
}

}  // namespace phi4mm
