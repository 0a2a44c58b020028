#include <algorithm>

#include "schedules.hpp"

namespace perseus::schedules {

// Warm-up forwards, then one backward and one forward in turn, then the remaining backwards.
// With S - s warm-up forwards this is DeepSpeed's TrainSchedule (checked in the tests).
std::vector<Instruction> one_f_one_b(int s, const ScheduleShape& shape, int extra) {
  const int M = shape.num_microbatches;
  std::vector<Instruction> result;
  const int warmup = std::min(M, shape.num_stages - s + extra);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) result.push_back({s, InstructionKind::forward, next_forward});
  while (next_backward < M) {
    result.push_back({s, InstructionKind::backward, next_backward++});
    if (next_forward < M) result.push_back({s, InstructionKind::forward, next_forward++});
  }
  return result;
}

}  // namespace perseus::schedules
