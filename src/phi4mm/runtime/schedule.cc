// The engine's scheduling policy (schedule.h): arithmetic over request descriptions only.
#include "phi4mm/runtime/schedule.h"

#include <algorithm>

namespace phi4mm::schedule {

int64_t AdmitPositions(const Request& r, const Limits& l) {
  const int64_t need = r.tokens + 1;
  return std::min(r.max_positions, (need + l.kv_block - 1) / l.kv_block * l.kv_block);
}

std::vector<int64_t> Admit(std::span<const Request> waiting, int64_t running, const Limits& l) {
  std::vector<int64_t> admitted;
  int64_t reserved = l.reserved_bytes;
  const int64_t spare = l.kv_block * l.bytes_per_position;
  for (const Request& r : waiting) {
    if (running >= l.max_running || !r.may_start) break;
    const int64_t positions = AdmitPositions(r, l);
    const int64_t bytes = positions * l.bytes_per_position;
    if (bytes > l.budget_bytes - reserved) break;
    if (bytes + spare > l.budget_bytes - reserved && running > 0) break;
    admitted.push_back(positions);
    reserved += bytes;
    ++running;
  }
  return admitted;
}

std::vector<RoomAction> MakeRoom(std::span<const Request> running, const Limits& l) {
  std::vector<RoomAction> actions;
  std::vector<int64_t> positions(running.size());
  std::vector<bool> gone(running.size(), false);
  for (size_t i = 0; i < running.size(); ++i) positions[i] = running[i].positions;
  int64_t reserved = l.reserved_bytes;
  for (size_t i = 0; i < running.size(); ++i) {
    const Request& r = running[i];
    // The positions once its next row is in: its tokens so far.
    if (gone[i] || r.phase != Phase::kDecoding || r.tokens <= positions[i]) continue;
    const int64_t grown = std::min(r.max_positions, positions[i] + l.kv_block);
    while (!gone[i]) {
      const int64_t more = (grown - positions[i]) * l.bytes_per_position;
      if (more <= l.budget_bytes - reserved) {
        reserved += more;
        positions[i] = grown;
        actions.push_back({false, i, grown});
        break;
      }
      size_t victim = running.size();
      for (size_t k = 0; k < running.size(); ++k)
        if (!gone[k] && positions[k] > 0 && (victim == running.size() || running[k].admission > running[victim].admission))
          victim = k;
      if (victim == running.size()) break;  // nothing holds KV: cannot happen, Submit checks the worst case
      gone[victim] = true;
      reserved -= positions[victim] * l.bytes_per_position;
      actions.push_back({true, victim, 0});
    }
  }
  return actions;
}

StepPlan PlanStep(std::span<const Request> running, const Limits& l) {
  StepPlan plan;
  for (size_t i = 0; i < running.size(); ++i) {
    const Request& r = running[i];
    if (r.phase != Phase::kDecoding) continue;
    if (!r.long_rope && r.wants_long_rope) plan.long_rope_restart.push_back(i);
    else
      plan.rows.push_back({i, 1 + r.draft, 1 + r.draft});
  }
  int64_t budget = l.prefill_chunk;
  for (size_t i = 0; i < running.size() && budget > 0; ++i) {
    const Request& r = running[i];
    if (r.phase != Phase::kPrefilling) continue;
    const int64_t left = r.tokens - r.cached;
    const int64_t n = std::min(budget, left);
    if (n <= 0) continue;
    plan.rows.push_back({i, n, n == left ? 1 : 0});
    budget -= n;
    plan.prefill_rows += n;
  }
  for (const StepRows& r : plan.rows) {
    plan.total_rows += r.n;
    plan.logit_rows += r.logit_rows;
  }
  return plan;
}

size_t NextToEncode(std::span<const Request> running) {
  for (size_t i = 0; i < running.size(); ++i)
    if (running[i].phase == Phase::kEncoding) return i;
  return running.size();
}

}  // namespace phi4mm::schedule
