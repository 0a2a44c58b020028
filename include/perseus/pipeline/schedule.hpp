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
// 1f1b: DeepSpeed's synchronous TrainSchedule; gpipe: all forwards, then all backwards.
std::vector<Instruction> stage_schedule(ScheduleKind kind, int stage, int num_stages,
                                        int num_microbatches);

}  // namespace perseus
