#pragma once
// Pipeline schedules (DESIGN §2.4): the order in which each stage runs its forwards and
// backwards.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perseus/profile/instruction_kind.hpp"

namespace perseus {

struct Instruction {
  int stage = 0;
  InstructionKind kind = InstructionKind::forward;
  int microbatch = 0;
  bool operator==(const Instruction&) const = default;
};

enum class ScheduleKind { one_f_one_b, gpipe };

std::string to_string(ScheduleKind kind);
std::optional<ScheduleKind> parse_schedule_kind(std::string_view text);

// Instructions of one stage in execution order.
// 1f1b: DeepSpeed's synchronous TrainSchedule (stage s runs S - s warm-up forwards, then
// alternates backward and forward); gpipe: all forwards, then all backwards.
// `extra_forwards` (1f1b only) pulls that many more forwards ahead of the stage's first
// backward: EnvPipe's reordered schedule. Zero gives DeepSpeed's order exactly.
std::vector<Instruction> stage_schedule(ScheduleKind kind, int stage, int num_stages,
                                        int num_microbatches, int extra_forwards = 0);

// Checks a per-stage extra-forward list (empty means none): one entry per stage, each
// 0 <= R_s <= M - (S - s), non-increasing down the pipe, 0 on the last stage, 1f1b only.
// Throws Error (kExitUsage) naming the stage.
void check_extra_forwards(ScheduleKind kind, const std::vector<int>& extra_forwards,
                          int num_stages, int num_microbatches);

}  // namespace perseus
