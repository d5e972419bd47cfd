// The engine's scheduling policy (runtime/schedule.h) on described requests alone, no model:
// admission order and the spare block, growth and preemption of the youngest admission, the rows
// of a step within the prefill budget (and a speculative draft's rows), the LongRoPE re-prefill and
// the encoder's turn.
#include "phi4mm/runtime/schedule.h"

#include <gtest/gtest.h>

namespace phi4mm::schedule {
namespace {

// 16-position blocks of 10 bytes a position: a block is 160 bytes.
Limits Budget(int64_t budget, int64_t reserved = 0, int64_t max_running = 8, int64_t prefill_chunk = 64) {
  Limits l;
  l.max_running = max_running;
  l.prefill_chunk = prefill_chunk;
  l.kv_block = 16;
  l.bytes_per_position = 10;
  l.budget_bytes = budget;
  l.reserved_bytes = reserved;
  return l;
}

Request Queued(int64_t tokens, int64_t max_positions = 1000) {
  Request r;
  r.tokens = tokens;
  r.max_positions = max_positions;
  return r;
}

Request Running(Phase phase, int64_t tokens, int64_t cached, int64_t positions, int64_t admission) {
  Request r;
  r.phase = phase;
  r.tokens = tokens;
  r.cached = cached;
  r.positions = positions;
  r.max_positions = 1000;
  r.admission = admission;
  return r;
}

TEST(Schedule, AdmitReservesTheRowsSoFarAndTheNextRoundedToABlockWithinTheWorstCase) {
  const Limits l = Budget(1 << 20);
  EXPECT_EQ(AdmitPositions(Queued(10), l), 16);
  EXPECT_EQ(AdmitPositions(Queued(15), l), 16);
  EXPECT_EQ(AdmitPositions(Queued(16), l), 32);  // the next row needs position 16
  EXPECT_EQ(AdmitPositions(Queued(16, 20), l), 20);
}

TEST(Schedule, AdmissionIsInArrivalOrderAndNoRequestIsOvertaken) {
  // 1000 bytes: a 16-position request takes 160, a 48-position one 480.
  const std::vector<Request> waiting = {Queued(10), Queued(40), Queued(10), Queued(5)};
  EXPECT_EQ(Admit(waiting, 0, Budget(1000)), (std::vector<int64_t>{16, 48, 16}));
  // The second does not fit with a block to spare next to the first: the small ones behind it wait.
  EXPECT_EQ(Admit(waiting, 0, Budget(700)), (std::vector<int64_t>{16}));
  // max_running counts the running ones.
  EXPECT_EQ(Admit(waiting, 7, Budget(1000)).size(), 1u);
  EXPECT_TRUE(Admit(waiting, 8, Budget(1000)).empty());
}

TEST(Schedule, TheFirstRequestIntoAnEmptyEngineNeedsNoSpareBlock) {
  const std::vector<Request> one = {Queued(40)};  // 48 positions = 480 bytes
  EXPECT_EQ(Admit(one, 0, Budget(480)), (std::vector<int64_t>{48}));
  EXPECT_TRUE(Admit(one, 0, Budget(479)).empty());
  EXPECT_TRUE(Admit(one, 1, Budget(480 + 159, 0)).empty());  // next to a running one: a block to spare
  EXPECT_EQ(Admit(one, 1, Budget(480 + 160, 0)), (std::vector<int64_t>{48}));
  EXPECT_TRUE(Admit(one, 1, Budget(1000, 400)).empty());  // what the running ones reserved counts
}

TEST(Schedule, AChoiceWaitingForItsSharedPromptHoldsTheQueue) {
  std::vector<Request> waiting = {Queued(10), Queued(10)};
  waiting[0].may_start = false;
  EXPECT_TRUE(Admit(waiting, 0, Budget(1000)).empty());
  waiting[0].may_start = true;
  waiting[1].may_start = false;
  EXPECT_EQ(Admit(waiting, 0, Budget(1000)).size(), 1u);
}

TEST(Schedule, AFullDecodingCacheGrowsByABlockWithinItsWorstCase) {
  // `tokens` counts the sampled token whose row runs next: a cache of 16 positions holding 16
  // rows has no room for it.
  std::vector<Request> running = {Running(Phase::kDecoding, 17, 16, 16, 1),   // full: grows
                                  Running(Phase::kDecoding, 16, 15, 16, 2),   // its last position left
                                  Running(Phase::kPrefilling, 40, 16, 48, 3), // not decoding
                                  Running(Phase::kDecoding, 33, 32, 32, 4)};
  running[3].max_positions = 40;
  const auto actions = MakeRoom(running, Budget(10000, 1120));
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_FALSE(actions[0].preempt);
  EXPECT_EQ(actions[0].index, 0u);
  EXPECT_EQ(actions[0].positions, 32);
  EXPECT_FALSE(actions[1].preempt);
  EXPECT_EQ(actions[1].index, 3u);
  EXPECT_EQ(actions[1].positions, 40);
}

TEST(Schedule, WithoutRoomTheYoungestAdmissionIsPreemptedFirst) {
  // Both full; 640 of 800 bytes reserved: the first grows (to 800), the second finds no room and
  // the youngest admission holding KV, request 1 (admission 7), goes: itself.
  const std::vector<Request> running = {Running(Phase::kDecoding, 33, 32, 32, 3),
                                        Running(Phase::kDecoding, 33, 32, 32, 7)};
  auto actions = MakeRoom(running, Budget(800, 640));
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_FALSE(actions[0].preempt);
  EXPECT_EQ(actions[0].index, 0u);
  EXPECT_TRUE(actions[1].preempt);
  EXPECT_EQ(actions[1].index, 1u);

  // The older one needs room and the younger is preempted for it, then it grows.
  actions = MakeRoom(running, Budget(640, 640));
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_TRUE(actions[0].preempt);
  EXPECT_EQ(actions[0].index, 1u);
  EXPECT_FALSE(actions[1].preempt);
  EXPECT_EQ(actions[1].index, 0u);
  EXPECT_EQ(actions[1].positions, 48);
}

TEST(Schedule, AFinishedRequestIsNeitherGrownNorAVictim) {
  std::vector<Request> running = {Running(Phase::kDecoding, 33, 32, 32, 1), Running(Phase::kFinished, 9, 0, 0, 9)};
  const auto actions = MakeRoom(running, Budget(320, 320));
  ASSERT_EQ(actions.size(), 1u);  // nothing to take from but itself
  EXPECT_TRUE(actions[0].preempt);
  EXPECT_EQ(actions[0].index, 0u);
}

TEST(Schedule, AStepTakesEveryDecodeRowThenPromptChunksWithinThePrefillBudget) {
  const std::vector<Request> running = {Running(Phase::kPrefilling, 100, 0, 112, 1),
                                        Running(Phase::kDecoding, 20, 19, 32, 2),
                                        Running(Phase::kEncoding, 50, 0, 64, 3),
                                        Running(Phase::kPrefilling, 30, 10, 32, 4),
                                        Running(Phase::kFinished, 5, 0, 0, 5)};
  StepPlan p = PlanStep(running, Budget(1 << 20, 0, 8, 64));
  ASSERT_EQ(p.rows.size(), 2u);  // the budget ends inside the first prompt
  EXPECT_EQ(p.rows[0].index, 1u);
  EXPECT_EQ(p.rows[0].n, 1);
  EXPECT_EQ(p.rows[0].logit_rows, 1);
  EXPECT_EQ(p.rows[1].index, 0u);
  EXPECT_EQ(p.rows[1].n, 64);
  EXPECT_EQ(p.rows[1].logit_rows, 0);
  EXPECT_EQ(p.prefill_rows, 64);
  EXPECT_EQ(p.total_rows, 65);
  EXPECT_EQ(p.logit_rows, 1);

  p = PlanStep(running, Budget(1 << 20, 0, 8, 120));
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[1].n, 100);
  EXPECT_EQ(p.rows[1].logit_rows, 1);  // the prompt's end
  EXPECT_EQ(p.rows[2].index, 3u);
  EXPECT_EQ(p.rows[2].n, 20);
  EXPECT_EQ(p.rows[2].logit_rows, 1);
  EXPECT_EQ(p.prefill_rows, 120);
  EXPECT_EQ(p.logit_rows, 3);
}

TEST(Schedule, ADraftRidesOnItsDecodeRowWithEveryRowsLogits) {
  std::vector<Request> running = {Running(Phase::kDecoding, 20, 19, 32, 1), Running(Phase::kDecoding, 40, 39, 48, 2),
                                  Running(Phase::kPrefilling, 30, 0, 32, 3)};
  running[1].draft = 5;
  const StepPlan p = PlanStep(running, Budget(1 << 20, 0, 8, 64));
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[0].n, 1);
  EXPECT_EQ(p.rows[0].logit_rows, 1);
  EXPECT_EQ(p.rows[1].index, 1u);
  EXPECT_EQ(p.rows[1].n, 6);           // its last id and the draft
  EXPECT_EQ(p.rows[1].logit_rows, 6);  // every row's
  EXPECT_EQ(p.rows[2].logit_rows, 1);  // the prompt's end
  EXPECT_EQ(p.prefill_rows, 30);       // drafts are decode rows, outside the prefill budget
  EXPECT_EQ(p.total_rows, 37);
  EXPECT_EQ(p.logit_rows, 8);
}

TEST(Schedule, ADecodingRequestPastTheLongRopeThresholdIsRecomputedNotStepped) {
  std::vector<Request> running = {Running(Phase::kDecoding, 4097, 4096, 4112, 1),
                                  Running(Phase::kDecoding, 4097, 4096, 4112, 2)};
  running[0].wants_long_rope = running[1].wants_long_rope = true;
  running[1].long_rope = true;  // already on the long table
  const StepPlan p = PlanStep(running, Budget(1 << 30));
  EXPECT_EQ(p.long_rope_restart, (std::vector<size_t>{0}));
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].index, 1u);
}

TEST(Schedule, TheEncoderServesTheFirstEncodingRequest) {
  std::vector<Request> running = {Running(Phase::kDecoding, 5, 4, 16, 1), Running(Phase::kEncoding, 9, 0, 16, 2),
                                  Running(Phase::kEncoding, 9, 0, 16, 3)};
  EXPECT_EQ(NextToEncode(running), 1u);
  running[1].phase = Phase::kPrefilling;
  EXPECT_EQ(NextToEncode(running), 2u);
  running[2].phase = Phase::kFinished;
  EXPECT_EQ(NextToEncode(running), running.size());
}

}  // namespace
}  // namespace phi4mm::schedule
