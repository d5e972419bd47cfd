// The batched engine's thread (engine.h describes one iteration): reaping cancelled and expired
// requests, admission with the KV budget and the prefix cache, encoder slices with the media
// cache, the batched decoder step, and per-request sampling, streaming and completion.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "phi4mm/runtime/engine_internal.h"

namespace phi4mm::engine_internal {

namespace {

// Moves a request between the waiting and running counts (under st.mu): the totals and those of
// its LoRA mode change by `waiting` and `running`.
void Recount(State& st, const Seq& s, int waiting, int running) {
  const size_t mode = static_cast<size_t>(s.prompt.mode);
  st.counters.waiting += waiting;
  st.counters.waiting_by_mode[mode] += waiting;
  st.counters.running += running;
  st.counters.running_by_mode[mode] += running;
}

// Adds `n` to one of the engine's counters.
void Count(State& st, int64_t EngineStats::*counter, int64_t n = 1) {
  std::lock_guard<std::mutex> l(st.mu);
  st.counters.*counter += n;
}

// Moves the newly submitted requests to the waiting queue (under st.mu).
void TakeIncoming(State& st) {
  for (; !st.incoming.empty(); st.incoming.pop_front()) {
    st.waiting.push_back(std::move(st.incoming.front()));
    Recount(st, *st.waiting.back(), 1, 0);
  }
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The request's cache (its first `len` positions) into the prefix cache under its position keys.
void InsertPrefix(State& st, const Seq& s, int64_t len) {
  if (len <= 0) return;
  std::vector<uint64_t> keys(static_cast<size_t>(len));
  const int64_t n = static_cast<int64_t>(s.keys.size());
  for (int64_t p = 0; p < len; ++p) keys[p] = p < n ? s.keys[p] : static_cast<uint32_t>(s.tokens[p]);
  st.prefix.Insert(s.prompt.mode, s.long_rope, std::move(keys), s.cache);
}

// A shared prompt's leader is done with it (its prefill ended, or the request did): the other
// choices may be admitted.
void PublishPrompt(Seq& s) {
  if (s.req.share_leader && s.req.prompt_share) s.req.prompt_share->published = true;
}

// Ends a request: its closing text (unless cut short), its result and counters, and it gives back
// its KV reservation at once. A finished request's cache goes to the prefix cache.
void Complete(State& st, Seq& s, FinishReason reason, Status status = Status::Ok()) {
  if (s.finished) return;
  s.finished = true;
  const std::string_view tail = s.answer->Finish(reason);
  GenerateResult& g = s.result.generation;
  g = std::move(s.answer->result());
  if (status.ok()) {
    if (!tail.empty() && s.req.on_event) s.req.on_event(StreamEvent{tail, -1});
    // The rows of its tokens (a verify step's cache may hold rows of drafted ids past them).
    InsertPrefix(st, s, std::min(s.cache.length(), static_cast<int64_t>(s.tokens.size()) - 1));
    if (s.req.generate.speculative.mode == SpeculativeMode::kNgram) st.ngram_pool.Add(s.tokens);
  }
  PublishPrompt(s);
  s.cache = KvCache();
  s.reservation.Reset();
  s.job = std::monostate();
  const Clock::time_point now = Clock::now();
  s.result.total_seconds = Seconds(s.submitted, now);
  g.prompt_tokens = static_cast<int64_t>(s.prompt.ids.size()) - s.result.cached_prompt_tokens;
  {
    std::lock_guard<std::mutex> l(st.mu);
    if (s.phase == Phase::kQueued) Recount(st, s, -1, 0);
    else Recount(st, s, 0, -1);
    st.counters.ngram_pool_bytes = st.ngram_pool.bytes();
    if (reason == FinishReason::kCancelled) ++st.counters.cancelled;
    else if (reason == FinishReason::kDeadline) ++st.counters.expired;
    else ++st.counters.finished;
  }
  {
    std::lock_guard<std::mutex> l(s.shared->mu);
    s.shared->status = std::move(status);
    s.shared->result = s.result;
  }
  if (st.defer_done) {
    st.done_later.push_back(s.shared);
    return;
  }
  s.shared->MarkDone();
}

// Tells the requests whose completion a step deferred (State::defer_done) that they are done.
void ReleaseDone(State& st) {
  st.defer_done = false;
  for (const auto& shared : st.done_later) shared->MarkDone();
  st.done_later.clear();
}

// Every image and clip of the request has its features: the preprocessed pixels and log-mel
// frames, and whatever the caller held for them (EngineRequest::media_hold), are let go.
// Not before every item has its features: one whose rows came from the prefix cache may have to be
// encoded after all (the LongRoPE switch recomputes the whole sequence).
void ReleaseMediaInputs(Seq& s) {
  for (const auto* items : {&s.media.image, &s.media.audio})
    for (const auto& f : *items)
      if (!f) return;
  for (auto& im : s.images) im.reset();
  for (AudioFeatures& a : s.prompt.audios) a = AudioFeatures{};
  s.req.media_hold.reset();
}

// Queues the encoder runs this request still needs for positions >= from: media without features,
// unless the media cache has them.
void PlanEncoding(State& st, Seq& s, int64_t from) {
  s.to_encode.clear();
  const int64_t n = static_cast<int64_t>(s.media.at.size());
  for (int64_t p = std::max<int64_t>(0, from); p < n; ++p) {
    const MediaRows::Ref& r = s.media.at[p];
    if (r.kind == MediaRows::kToken) continue;
    MediaRows::Features& feat = s.media.features(r);
    if (feat) continue;
    const std::pair<MediaRows::Kind, int32_t> item{r.kind, r.index};
    if (std::find(s.to_encode.begin(), s.to_encode.end(), item) != s.to_encode.end()) continue;
    feat = st.media.Find(r.kind == MediaRows::kImage ? s.image_keys[r.index] : s.audio_keys[r.index]);
    if (!feat) s.to_encode.push_back(item);
  }
  s.phase = s.to_encode.empty() ? Phase::kPrefilling : Phase::kEncoding;
  if (s.to_encode.empty()) ReleaseMediaInputs(s);
}

// What the policy (schedule.h) sees of a request, and of the engine.
template <class Seqs>
std::vector<schedule::Request> Describe(const Model& m, const Seqs& seqs) {
  std::vector<schedule::Request> v;
  for (const auto& sp : seqs) {
    const Seq& s = *sp;
    schedule::Request& r = v.emplace_back();
    r.phase = s.finished ? Phase::kFinished : s.phase;
    r.tokens = static_cast<int64_t>(s.tokens.size());
    r.cached = s.cache.length();
    r.positions = s.finished ? 0 : s.positions;
    r.max_positions = s.max_positions;
    r.long_rope = s.long_rope;
    r.wants_long_rope = m.decoder().rotary().UseLong(r.tokens);
    r.may_start = !s.req.prompt_share || s.req.share_leader || s.req.prompt_share->published || s.preemptions > 0;
    r.admission = s.admission;
    r.draft = static_cast<int64_t>(s.answer->draft().size());
  }
  return v;
}
schedule::Limits Limits(const Model& m, const EngineOptions& o, const State& st) {
  const Decoder& dec = m.decoder();
  return {o.max_running, o.prefill_chunk, o.kv_block, dec.kv_bytes_per_token(), st.budget.limit(), st.budget.reserved()};
}

// Admits the request with `positions` reserved (schedule::Admit chose it). A preempted request comes
// back with its cache read from swap, or empty to be recomputed.
bool Admit(const Model& m, State& st, Seq& s, int64_t positions) {
  const Decoder& dec = m.decoder();
  const int64_t bytes = positions * dec.kv_bytes_per_token();
  if (!st.budget.TryReserve(bytes)) return false;  // cannot happen: the policy counted the same budget
  s.reservation = KvReservation(&st.budget, bytes);
  s.positions = positions;
  s.cache = dec.NewCache();
  const int64_t n = static_cast<int64_t>(s.prompt.ids.size());
  if (s.preemptions > 0) {
    bool restored = false;
    if (!s.swapped.empty()) restored = st.swap.In(s.swapped, positions, &s.cache).ok();
    if (!restored) s.cache.Reserve(positions);
    Count(st, restored ? &EngineStats::swapped_in : &EngineStats::recomputed);
  } else {
    s.cache.Reserve(positions);
    s.long_rope = dec.rotary().UseLong(n);
    // At most n - 1 positions come from the cache: the prompt's last row runs to give the logits.
    const PrefixCache::Match match = st.prefix.Find(s.prompt.mode, s.long_rope, s.keys, n - 1);
    if (match.length > 0 && s.cache.CopyPrefixFrom(match.entry->cache, match.length).ok())
      s.result.cached_prompt_tokens = match.length;
    s.admitted = Clock::now();
    s.result.queue_seconds = Seconds(s.submitted, s.admitted);
  }
  s.admission = ++st.admissions;
  PlanEncoding(st, s, s.cache.length());
  return true;
}

// Frees the KV of a running request and puts it back at the head of the queue: its cache is
// swapped out when the swap space takes it (and read back at its next admission), else dropped
// (its rows are recomputed then).
void Preempt(State& st, std::unique_ptr<Seq> sp) {
  Seq& s = *sp;
  if (s.cache.length() > 0 && st.swap.limit() > 0) {
    auto out = st.swap.Out(s.cache);
    if (out.ok()) s.swapped = std::move(out).value();
  }
  s.cache = KvCache();
  s.reservation.Reset();
  s.positions = 0;
  s.phase = Phase::kQueued;
  s.to_encode.clear();
  ++s.preemptions;
  {
    std::lock_guard<std::mutex> l(st.mu);
    ++st.counters.preempted;
    Recount(st, s, 1, -1);
  }
  st.waiting.push_front(std::move(sp));
}

// Gives every decoding request room for its next row, preempting as schedule::MakeRoom says.
void MakeRoomToDecode(const Model& m, const EngineOptions& o, State& st) {
  const int64_t per_token = m.decoder().kv_bytes_per_token();
  for (const schedule::RoomAction& a : schedule::MakeRoom(Describe(m, st.running), Limits(m, o, st))) {
    Seq& s = *st.running[a.index];
    if (a.preempt) {
      Preempt(st, std::move(st.running[a.index]));
    } else if (s.reservation.TryGrow((a.positions - s.positions) * per_token)) {
      s.cache.Grow(a.positions);
      s.positions = a.positions;
    }
  }
  std::erase(st.running, nullptr);
}

// A vision or speech job's features once it is done (one more encoder run, counted for the request
// and for the engine), else null.
template <class Job>
Result<MediaCache::Features> Encoded(const Model& m, State& st, Job& job, int64_t& request_runs,
                                     int64_t EngineStats::*engine_runs) {
  if (!job.encoded()) return MediaCache::Features();
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> f, job.Finish(m.pool()));
  ++request_runs;
  Count(st, engine_runs);
  return std::make_shared<const std::vector<float>>(std::move(f));
}

// One slice of the request's vision job for image `idx` (started by the first): the features once
// the job is done, else null.
Result<MediaCache::Features> VisionSlice(const Model& m, const EngineOptions& o, State& st, Seq& s, int32_t idx) {
  if (!std::holds_alternative<VisionEncodeJob>(s.job)) {
    PHI4MM_ASSIGN_OR_RETURN(const VisionModel* vision, m.vision());
    PHI4MM_ASSIGN_OR_RETURN(s.job, vision->StartEncode(s.images[idx]));
  }
  auto& job = std::get<VisionEncodeJob>(s.job);
  const int64_t before = job.crops_done();
  PHI4MM_RETURN_IF_ERROR(job.StepLayers(o.vision_layers_per_slice, m.pool()));
  Count(st, &EngineStats::vision_crops, job.crops_done() - before);
  return Encoded(m, st, job, s.result.images_encoded, &EngineStats::images_encoded);
}

// The same for the speech job of clip `idx`, whose first slice is the encoder's front (subsampling).
Result<MediaCache::Features> SpeechSlice(const Model& m, const EngineOptions& o, State& st, Seq& s, int32_t idx) {
  if (!std::holds_alternative<SpeechEncodeJob>(s.job)) {
    PHI4MM_ASSIGN_OR_RETURN(const SpeechModel* speech, m.speech());
    PHI4MM_ASSIGN_OR_RETURN(s.job, speech->StartEncode(s.prompt.audios[idx], s.prompt.audio_with_image, m.pool()));
    return MediaCache::Features();
  }
  auto& job = std::get<SpeechEncodeJob>(s.job);
  const int64_t before = job.blocks_done();
  PHI4MM_RETURN_IF_ERROR(job.Step(o.speech_blocks_per_slice, m.pool()));
  Count(st, &EngineStats::speech_blocks, job.blocks_done() - before);
  return Encoded(m, st, job, s.result.audios_encoded, &EngineStats::audios_encoded);
}

// One slice of encoder work for the first request that needs it; false when none does. An item's
// features, once encoded, go to the media cache under its content key.
bool EncodeSlice(const Model& m, const EngineOptions& o, State& st) {
  for (size_t i; (i = schedule::NextToEncode(Describe(m, st.running))) < st.running.size();) {
    Seq& s = *st.running[i];
    if (s.to_encode.empty()) {
      s.phase = Phase::kPrefilling;
      continue;
    }
    const auto [kind, idx] = s.to_encode.front();
    const bool image = kind == MediaRows::kImage;
    const Clock::time_point slice_start = Clock::now();
    auto done = image ? VisionSlice(m, o, st, s, idx) : SpeechSlice(m, o, st, s, idx);
    s.job_seconds += Seconds(slice_start, Clock::now());
    if (!done.ok()) {
      Complete(st, s, FinishReason::kCancelled,
               done.status().WithContext((image ? "image " : "audio ") + std::to_string(idx + 1)));
    } else if (*done) {
      st.media.Insert(image ? s.image_keys[idx] : s.audio_keys[idx], *done);
      (image ? s.media.image : s.media.audio)[idx] = *done;
      (image ? s.result.image_encode_seconds : s.result.audio_encode_seconds).push_back(s.job_seconds);
      s.job_seconds = 0;
      s.job = std::monostate();
      s.to_encode.pop_front();
      if (s.to_encode.empty()) {
        s.phase = Phase::kPrefilling;
        ReleaseMediaInputs(s);
      }
    }
    return true;
  }
  return false;
}

// Takes the request's logits rows of a step (one, or one per drafted id and one more) through its
// Sequence: each token is streamed, and the request either goes on decoding or completes. The
// cache keeps the rows of what was taken.
void OnRows(State& st, Seq& s, float* logits, int64_t rows, int64_t vocab) {
  s.phase = Phase::kDecoding;
  if (!s.has_first_token && s.req.share_leader && s.req.prompt_share && !s.req.prompt_share->published) {
    InsertPrefix(st, s, s.cache.length());  // the prompt, for the other choices
    PublishPrompt(s);
  }
  const auto emit = [&](const Sequence::Step& step) {
    if (!s.has_first_token) {
      s.has_first_token = true;
      s.first_token = Clock::now();
      s.result.time_to_first_token = Seconds(s.submitted, s.first_token);
    }
    return !step.stream || !s.req.on_event || s.req.on_event(StreamEvent{step.text, step.token, step.logprobs});
  };
  const Sequence::Taken t =
      s.answer->Take(std::span(logits, static_cast<size_t>(rows * vocab)), &s.tokens, emit, s.req.on_logits);
  if (t.drafted > 0) {
    std::lock_guard<std::mutex> l(st.mu);
    ++st.counters.drafts;
    st.counters.draft_tokens += t.drafted;
    st.counters.accepted_draft_tokens += t.taken;
    if (t.from_pool) {
      st.counters.pool_draft_tokens += t.drafted;
      st.counters.pool_accepted_tokens += t.taken;
    }
  }
  if (t.finish)
    Complete(st, s, *t.finish, t.error);
  else
    s.cache.Truncate(static_cast<int64_t>(s.tokens.size()) - 1);
}

// Drafts for the decoding requests (Sequence::Propose), each within the KV room it already holds
// and for a step of the rows counted so far; every other request's draft is dropped.
void ChooseDrafts(State& st) {
  int64_t base = 0;
  for (const auto& sp : st.running) base += !sp->finished && sp->phase == Phase::kDecoding;
  for (const auto& sp : st.running) {
    Seq& s = *sp;
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    const bool ready = !s.finished && s.phase == Phase::kDecoding && s.cache.length() == len - 1;
    base += static_cast<int64_t>(
        s.answer->Propose(s.tokens, ready ? s.positions - len : 0, s.long_rope, st.step_costs, base, &st.ngram_pool)
            .size());
  }
}

// One batched decoder step; false when no request had rows to run.
bool RunStep(const Model& m, const EngineOptions& o, State& st) {
  const Decoder& dec = m.decoder();
  const int64_t H = dec.config().hidden_size;
  ChooseDrafts(st);
  const schedule::StepPlan plan = schedule::PlanStep(Describe(m, st.running), Limits(m, o, st));
  for (size_t i : plan.long_rope_restart) {
    // The sequence passed original_max_position_embeddings: recompute it with the long table, as
    // Session does (reference-deviations.md), media rows included.
    Seq& s = *st.running[i];
    s.cache.Clear();
    s.long_rope = true;
    PlanEncoding(st, s, 0);
  }
  if (plan.rows.empty()) return !plan.long_rope_restart.empty();
  const std::vector<schedule::StepRows>& rows = plan.rows;
  auto seq = [&](const schedule::StepRows& r) -> Seq& { return *st.running[r.index]; };
  const int64_t prefill = plan.prefill_rows, R = plan.total_rows, with_logits = plan.logit_rows;
  st.embeds.resize(static_cast<size_t>(R * H));
  st.hidden.resize(static_cast<size_t>(with_logits * H));
  std::vector<SeqChunk> chunks;
  std::vector<const float*> overrides;
  std::array<int64_t, 3> mode_rows{};
  int64_t off = 0, li = 0;
  for (const schedule::StepRows& r : rows) {
    Seq& s = seq(r);
    const int64_t start = s.cache.length();
    s.media.Overrides(start, r.n, H, &overrides);
    float* e = st.embeds.data() + off * H;
    // The rows' ids: the request's next ones (a decoding request's last id and its draft after it).
    st.ids.assign(s.tokens.begin() + start, s.tokens.begin() + std::min<int64_t>(start + r.n, s.tokens.size()));
    st.ids.insert(st.ids.end(), s.answer->draft().begin(), s.answer->draft().end());
    if (Status es = m.embedding().EmbedRows(std::span(st.ids).first(r.n), overrides, e); !es.ok()) {
      Complete(st, s, FinishReason::kCancelled, es);
      continue;
    }
    SeqChunk ch{e, r.n, &s.cache, s.prompt.mode, s.long_rope, r.logit_rows ? st.hidden.data() + li * H : nullptr};
    if (r.logit_rows > 1) std::swap(ch.last_hidden, ch.all_hidden);
    chunks.push_back(ch);
    mode_rows[static_cast<size_t>(s.prompt.mode)] += r.n;
    li += r.logit_rows;
    off += r.n;
  }
  // Profiling: decode-only steps, when the options ask for it.
  using Clock = std::chrono::steady_clock;
  const bool profile = o.profile_steps && prefill == 0;
  DecoderStepTimes times;
  st.scratch.times = profile ? &times : nullptr;
  const Clock::time_point t0 = Clock::now();
  if (Status ss = dec.Step(chunks, m.pool(), &st.scratch); !ss.ok()) {
    st.scratch.times = nullptr;
    for (const schedule::StepRows& r : rows) Complete(st, seq(r), FinishReason::kCancelled, ss.WithContext("decoder step"));
    return true;
  }
  const Clock::time_point ts = profile ? Clock::now() : Clock::time_point{};
  st.scratch.times = nullptr;
  const int64_t V = dec.lm_head().rows();
  if (with_logits > 0) {
    st.logits.resize(static_cast<size_t>(with_logits * V));
    dec.LogitsRows(st.hidden.data(), with_logits, st.logits.data(), m.pool());
  }
  const Clock::time_point t1 = Clock::now();
  // Decode-only steps (their cost by rows, for the draft tuners).
  if (prefill == 0) st.step_costs.Record(R, std::chrono::duration<double>(t1 - t0).count());
  li = 0;
  st.defer_done = true;  // answered after the counters below
  for (const schedule::StepRows& r : rows) {
    if (r.logit_rows > 0 && !seq(r).finished) OnRows(st, seq(r), st.logits.data() + li * V, r.logit_rows, V);
    li += r.logit_rows;
  }
  {
    std::lock_guard<std::mutex> l(st.mu);
    if (profile) {
      EngineStats::DecodeProfile& p = st.counters.decode_profile;
      auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
      ++p.steps;
      p.rows += R;
      p.decoder += times;
      p.outside_layers += secs(ts - t0) - times.sum();
      p.lm_head += secs(t1 - ts);
      p.sampling += secs(Clock::now() - t1);
    }
    ++st.counters.steps;
    st.counters.batch_rows += R;
    for (size_t i = 0; i < mode_rows.size(); ++i) st.counters.rows_by_mode[i] += mode_rows[i];
    const auto& bounds = EngineStats::kStepRowBounds;
    st.counters.step_rows[static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), R) - bounds.begin())] += 1;
    st.counters.prefill_rows += prefill;
    st.counters.decode_rows += R - prefill;
  }
  ReleaseDone(st);
  return true;
}

// Ends the requests that were cancelled or whose deadline passed, whatever their phase.
void Reap(State& st) {
  const Clock::time_point now = Clock::now();
  auto check = [&](Seq& s) {
    if (s.finished) return;
    if (s.shared->cancel) Complete(st, s, FinishReason::kCancelled);
    else if (now >= s.req.deadline) Complete(st, s, FinishReason::kDeadline);
  };
  for (auto& s : st.waiting) check(*s);
  for (auto& s : st.running) check(*s);
  std::erase_if(st.waiting, [](const auto& s) { return s->finished; });
  std::erase_if(st.running, [](const auto& s) { return s->finished; });
}

}  // namespace

void Loop(const Model& m, const EngineOptions& o, State& st) {
  for (;;) {
    {
      std::lock_guard<std::mutex> l(st.mu);
      if (st.stop) break;
      TakeIncoming(st);
      st.nudged = false;
    }
    Reap(st);
    // Admission (schedule::Admit): a preempted request waits at the head, a choice that shares a
    // prompt waits for its leader to publish it.
    for (int64_t positions : schedule::Admit(Describe(m, st.waiting), st.running.size(), Limits(m, o, st))) {
      if (!Admit(m, st, *st.waiting.front(), positions)) break;
      st.running.push_back(std::move(st.waiting.front()));
      st.waiting.pop_front();
      std::lock_guard<std::mutex> l(st.mu);
      Recount(st, *st.running.back(), -1, 1);
    }
    bool worked = EncodeSlice(m, o, st);
    MakeRoomToDecode(m, o, st);
    worked = RunStep(m, o, st) || worked;
    Reap(st);
    if (worked && o.after_step) o.after_step();
    if (!worked) {
      std::unique_lock<std::mutex> l(st.mu);
      st.cv.wait_for(l, std::chrono::milliseconds(20), [&] { return st.stop || st.nudged || !st.incoming.empty(); });
    }
  }
  // Shutdown: everything still here ends as cancelled.
  {
    std::lock_guard<std::mutex> l(st.mu);
    TakeIncoming(st);
  }
  for (auto& s : st.waiting) Complete(st, *s, FinishReason::kCancelled);
  for (auto& s : st.running) Complete(st, *s, FinishReason::kCancelled);
  st.waiting.clear();
  st.running.clear();
}

}  // namespace phi4mm::engine_internal
