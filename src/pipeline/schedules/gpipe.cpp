#include "schedules.hpp"

namespace perseus::schedules {

// All forwards, then all backwards.
std::vector<Instruction> gpipe(int s, const ScheduleShape& shape, int) {
  std::vector<Instruction> result;
  for (int m = 0; m < shape.num_microbatches; ++m) result.push_back({s, InstructionKind::forward, m});
  for (int m = 0; m < shape.num_microbatches; ++m) result.push_back({s, InstructionKind::backward, m});
  return result;
}

}  // namespace perseus::schedules
