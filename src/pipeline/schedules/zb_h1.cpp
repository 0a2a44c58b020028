#include <algorithm>
#include <deque>

#include "schedules.hpp"

namespace perseus::schedules {

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"), in the order PyTorch's
// ScheduleInterleavedZeroBubble gives one model chunk per stage: stage r runs S - 1 - r warm-up
// forwards, then a forward and an input-gradient backward (I) in turn, then the remaining I's.
// The weight-gradient parts (W) follow their I's in the same order, each right after an I, but
// stage r holds back its first r of them: they fill the cool-down bubble at the end. At most S
// microbatches' activations are alive on any stage, as in 1F1B.
std::vector<Instruction> zb_h1(int r, const ScheduleShape& shape, int) {
  const int S = shape.num_stages, M = shape.num_microbatches;
  const int warmup = std::min(S - 1 - r, M);
  std::vector<Instruction> result;
  result.reserve(static_cast<std::size_t>(3 * M));
  int next_forward = 0, next_input = 0, next_weight = 0;
  auto input_then_weight = [&](int step) {
    result.push_back({r, InstructionKind::backward_input, next_input++});
    if (step >= r) result.push_back({r, InstructionKind::backward_weight, next_weight++});
  };
  while (next_forward < warmup) result.push_back({r, InstructionKind::forward, next_forward++});
  for (int step = 0; next_input < M; ++step) {
    if (next_forward < M) result.push_back({r, InstructionKind::forward, next_forward++});
    input_then_weight(step);
  }
  while (next_weight < M) result.push_back({r, InstructionKind::backward_weight, next_weight++});
  return result;
}

}  // namespace perseus::schedules
