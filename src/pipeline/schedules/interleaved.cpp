#include <algorithm>

#include "schedules.hpp"

namespace perseus::schedules {

namespace {

// Megatron-LM's numbering of a stage's k-th forward (or backward) among its M * V: groups of
// S * V, each running S microbatches through chunk 0, then the same S through chunk 1, ...;
// backwards visit the chunks last first.
Instruction kth(int stage, const ScheduleShape& shape, int k, InstructionKind kind) {
  const int S = shape.num_stages, V = shape.virtual_stages;
  const int group = k / (S * V), in_group = k % (S * V);
  int chunk = in_group / S;
  if (kind == InstructionKind::backward) chunk = V - 1 - chunk;
  return {stage, kind, group * S + k % S, chunk};
}

}  // namespace

// Megatron-LM's forward_backward_pipelining_with_interleaving without overlap: stage r runs
// min((S - r - 1) * 2 + (V - 1) * S, M * V) warm-up forwards, then a forward and a backward in
// turn, then the remaining backwards.
std::vector<Instruction> interleaved(int r, const ScheduleShape& shape, int) {
  const int S = shape.num_stages, V = shape.virtual_stages;
  const int total = shape.num_microbatches * V;
  const int warmup = std::min((S - r - 1) * 2 + (V - 1) * S, total);
  std::vector<Instruction> result;
  result.reserve(static_cast<std::size_t>(2 * total));
  for (int k = 0; k < warmup; ++k) result.push_back(kth(r, shape, k, InstructionKind::forward));
  for (int k = 0; k < total - warmup; ++k) {
    result.push_back(kth(r, shape, warmup + k, InstructionKind::forward));
    result.push_back(kth(r, shape, k, InstructionKind::backward));
  }
  for (int k = total - warmup; k < total; ++k) result.push_back(kth(r, shape, k, InstructionKind::backward));
  return result;
}

}  // namespace perseus::schedules
