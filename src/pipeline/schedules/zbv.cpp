#include <algorithm>

#include "schedules.hpp"

namespace perseus::schedules {

// ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory"), in the order PyTorch's
// ScheduleZBVZeroBubble gives: two chunks per stage in a V (chunk 0 = model stage r, chunk 1 = model
// stage 2S - 1 - r). Warm-up forwards of chunk 0, then chunk 1 and chunk 0 in turn, then chunk 1's
// forward, I and W; the steady phase runs F, I, W of chunk 0 and of chunk 1 in turn; the cool-down
// runs the remaining I's of both chunks and then the W's. The order is built for
// max(2S - 1, M) microbatches and the ones beyond M dropped, as PyTorch does.
std::vector<Instruction> zbv(int r, const ScheduleShape& shape, int) {
  const int S = shape.num_stages, M = shape.num_microbatches;
  const int n = std::max(2 * S - 1, M);
  std::vector<Instruction> all;
  int forwards[2] = {0, 0}, inputs[2] = {0, 0};
  auto add = [&](InstructionKind kind, int chunk, int microbatch) {
    all.push_back({r, kind, microbatch, chunk, true});
  };
  auto forward = [&](int c) { add(InstructionKind::forward, c, forwards[c]++); };
  auto input = [&](int c) { add(InstructionKind::backward_input, c, inputs[c]++); };
  auto input_weight = [&](int c) {
    add(InstructionKind::backward_input, c, inputs[c]);
    add(InstructionKind::backward_weight, c, inputs[c]++);
  };
  for (int i = 0; i < 2 * (S - r) - 1; ++i) forward(0);
  for (int i = 0; i < r; ++i) forward(1), forward(0);
  for (int i = 0; i < S - r; ++i) forward(1), input_weight(1);
  while (forwards[1] < forwards[0] || forwards[0] < n) {
    if (forwards[0] < n) forward(0);
    input_weight(0);
    forward(1);
    input_weight(1);
  }
  int weights[2] = {inputs[0], inputs[1]};
  for (int i = 0; i < r; ++i) input(0), input(1);
  for (int i = 0; i < S - r; ++i) input(0), add(InstructionKind::backward_weight, 0, weights[0]++);
  while (weights[1] < inputs[1]) add(InstructionKind::backward_weight, 1, weights[1]++);
  while (weights[0] < inputs[0]) add(InstructionKind::backward_weight, 0, weights[0]++);
  std::vector<Instruction> result;
  std::copy_if(all.begin(), all.end(), std::back_inserter(result),
               [M](const Instruction& i) { return i.microbatch < M; });
  return result;
}

}  // namespace perseus::schedules
