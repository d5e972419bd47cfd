// The batched engine's scheduling policy as pure functions over what it knows of its requests:
// admission (arrival order, the KV budget with a block to spare), KV growth and preemption (the
// youngest admission goes first), the rows of a step (decode rows first, then prompt chunks within
// the prefill budget, first come first served), the LongRoPE re-prefill, and which request the
// encoder serves. No model, cache or clock: the engine thread (scheduler.cc) describes its
// requests, asks, and carries the answer out; tests/schedule_test.cc checks the policy alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace phi4mm::schedule {

// kFinished: ended, not yet taken out of the engine's lists; it holds no KV and gets no work.
enum class Phase { kQueued, kEncoding, kPrefilling, kDecoding, kFinished };

// One request as the policy sees it.
struct Request {
  Phase phase = Phase::kQueued;
  int64_t tokens = 0;           // prompt + generated tokens so far
  int64_t cached = 0;           // positions in its KV cache
  int64_t positions = 0;        // KV positions reserved for it (0 while queued)
  int64_t max_positions = 0;    // the most it can need: prompt + max new tokens, within the context
  bool long_rope = false;       // its cache uses the long rotary table
  bool wants_long_rope = false; // its length asks for the long table (RotaryTables::UseLong)
  bool may_start = true;        // queued: false while it waits for the prompt a leader shares
  int64_t admission = 0;        // running: when it was last admitted (larger = younger)
  int64_t draft = 0;            // decoding: drafted ids to verify after its next row (speculative.h)
};

struct Limits {
  int64_t max_running = 1;
  int64_t prefill_chunk = 1;         // prompt rows per step, all requests together
  int64_t kv_block = 1;              // positions a cache grows by
  int64_t bytes_per_position = 0;    // KV bytes of one position
  int64_t budget_bytes = 0;          // the engine's KV budget
  int64_t reserved_bytes = 0;        // of it, reserved by the running requests now
};

// The positions a request reserves when it is admitted: its rows so far (the prompt, or everything
// up to a preemption) and the next one, rounded up to a block, within its worst case.
int64_t AdmitPositions(const Request& r, const Limits& l);

// Admission from the head of `waiting` (arrival order, never overtaken) while `running` requests
// leave room: the positions each admitted request reserves, in order. A request is admitted when
// its KV fits with a block to spare (so a running request can grow once before anything must be
// preempted); the first one into an empty engine needs only to fit.
std::vector<int64_t> Admit(std::span<const Request> waiting, int64_t running, const Limits& l);

// What room for the next decode row takes: growing request `index` to `positions`, or preempting
// it (its KV freed, it goes back to the head of the queue).
struct RoomAction {
  bool preempt = false;
  size_t index = 0;
  int64_t positions = 0;
};
// Every decoding request whose cache is full grows by a block; while the budget has no room, the
// youngest admission holding KV (perhaps the growing request itself) is preempted. In order.
std::vector<RoomAction> MakeRoom(std::span<const Request> running, const Limits& l);

struct StepRows {
  size_t index = 0;
  int64_t n = 0;           // rows from the request's cache length on
  // Of them, the last rows whose logits are wanted: 1 for a decode row or a prompt's end, all n
  // for a decode row and its draft, 0 for the inside of a prompt.
  int64_t logit_rows = 0;
};
struct StepPlan {
  // Decoding requests that just passed the long table's threshold: their caches are dropped and
  // every row, media included, is recomputed with the long table (reference-deviations.md).
  std::vector<size_t> long_rope_restart;
  std::vector<StepRows> rows;
  int64_t total_rows = 0, prefill_rows = 0, logit_rows = 0;  // over `rows`
};
StepPlan PlanStep(std::span<const Request> running, const Limits& l);

// The request the encoder's next slice serves: the first encoding one (or running.size()).
size_t NextToEncode(std::span<const Request> running);

}  // namespace phi4mm::schedule
