#include "perseus/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "perseus/util/error.hpp"

namespace perseus {

std::string to_string(ScheduleKind kind) {
  return kind == ScheduleKind::one_f_one_b ? "1f1b" : "gpipe";
}

std::optional<ScheduleKind> parse_schedule_kind(std::string_view text) {
  if (text == "1f1b") return ScheduleKind::one_f_one_b;
  if (text == "gpipe") return ScheduleKind::gpipe;
  return std::nullopt;
}

namespace {

// Warm-up forwards, then one backward and one forward in turn, then the remaining backwards.
// With S - s warm-up forwards this is DeepSpeed's TrainSchedule (checked in the tests).
std::vector<Instruction> one_f_one_b(int s, int S, int M, int extra) {
  std::vector<Instruction> result;
  const int warmup = std::min(M, S - s + extra);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) result.push_back({s, InstructionKind::forward, next_forward});
  while (next_backward < M) {
    result.push_back({s, InstructionKind::backward, next_backward++});
    if (next_forward < M) result.push_back({s, InstructionKind::forward, next_forward++});
  }
  return result;
}

}  // namespace

std::vector<Instruction> stage_schedule(ScheduleKind kind, int stage, int num_stages,
                                        int num_microbatches, int extra_forwards) {
  if (num_stages < 1 || num_microbatches < 1 || stage < 0 || stage >= num_stages) {
    throw Error("schedule needs stages >= 1, microbatches >= 1 and 0 <= stage < stages",
                kExitUsage);
  }
  if (kind == ScheduleKind::one_f_one_b) return one_f_one_b(stage, num_stages, num_microbatches, extra_forwards);
  std::vector<Instruction> result;
  for (int m = 0; m < num_microbatches; ++m) result.push_back({stage, InstructionKind::forward, m});
  for (int m = 0; m < num_microbatches; ++m) result.push_back({stage, InstructionKind::backward, m});
  return result;
}

void check_extra_forwards(ScheduleKind kind, const std::vector<int>& extra_forwards,
                          int num_stages, int num_microbatches) {
  if (extra_forwards.empty()) return;
  if (kind != ScheduleKind::one_f_one_b) throw Error("extra forwards need the 1f1b schedule", kExitUsage);
  if (static_cast<int>(extra_forwards.size()) != num_stages) {
    throw Error(fmt::format("extra forwards list has {} entries for {} stages", extra_forwards.size(), num_stages),
                kExitUsage);
  }
  for (int s = 0; s < num_stages; ++s) {
    const int r = extra_forwards[s];
    const int cap = std::max(0, num_microbatches - (num_stages - s));
    if (r < 0 || r > cap) {
      throw Error(fmt::format("extra forwards of stage {} is {}; it must be in [0, {}]", s, r, cap), kExitUsage);
    }
    if (s > 0 && r > extra_forwards[s - 1]) {
      throw Error(fmt::format("extra forwards must not increase down the pipe (stage {}: {} > {})", s, r,
                              extra_forwards[s - 1]), kExitUsage);
    }
  }
  if (extra_forwards.back() != 0) throw Error("the last stage cannot run extra forwards", kExitUsage);
}

}  // namespace perseus
