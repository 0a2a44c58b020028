#include "perseus/pipeline/schedule.hpp"

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

// Python-style floor division for possibly negative integers.
int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

std::vector<Instruction> one_f_one_b(int s, int S, int M) {
  std::vector<Instruction> result;
  const int steps = 2 * (M + S - 1);
  for (int k = 0; k < steps; ++k) {
    const bool forward = (k % 2) == (s % 2);
    int m;
    if (forward) {
      m = (k % 2 == 0 ? k / 2 : (k - 1) / 2) - s / 2;
    } else if (k % 2 == 0) {  // even step, odd stage
      m = floor_div(k, 2) - S + (s + 1) / 2;
    } else {  // odd step, even stage
      m = floor_div(k - 1, 2) - S + 1 + s / 2;
    }
    if (m >= 0 && m < M) {
      result.push_back({s, forward ? InstructionKind::forward : InstructionKind::backward, m});
    }
  }
  return result;
}

}  // namespace

std::vector<Instruction> stage_schedule(ScheduleKind kind, int stage, int num_stages,
                                        int num_microbatches) {
  if (num_stages < 1 || num_microbatches < 1 || stage < 0 || stage >= num_stages) {
    throw Error("schedule needs stages >= 1, microbatches >= 1 and 0 <= stage < stages",
                kExitUsage);
  }
  if (kind == ScheduleKind::one_f_one_b) return one_f_one_b(stage, num_stages, num_microbatches);
  std::vector<Instruction> result;
  for (int m = 0; m < num_microbatches; ++m) result.push_back({stage, InstructionKind::forward, m});
  for (int m = 0; m < num_microbatches; ++m) result.push_back({stage, InstructionKind::backward, m});
  return result;
}

}  // namespace perseus
