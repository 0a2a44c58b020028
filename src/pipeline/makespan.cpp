#include "perseus/pipeline/makespan.hpp"

#include <algorithm>
#include <stdexcept>

namespace perseus {

double run_pipeline(const std::vector<std::vector<Instruction>>& orders, int num_microbatches, double start,
                    const std::function<double(int, std::size_t, double)>& run) {
  const int S = static_cast<int>(orders.size()), M = num_microbatches;
  int V = 1;  // model chunks per stage (interleaved schedules)
  for (const auto& order : orders)
    for (const auto& inst : order) V = std::max(V, inst.chunk + 1);
  const int K = S * V;  // model stages
  const double unset = -1;
  std::vector<double> forward_end(static_cast<std::size_t>(K) * static_cast<std::size_t>(M), unset);
  std::vector<double> backward_end(forward_end);
  std::vector<std::size_t> cursor(static_cast<std::size_t>(S), 0);
  std::vector<double> free_at(static_cast<std::size_t>(S), start);
  auto at = [M](int s, int m) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(M) + static_cast<std::size_t>(m); };
  std::size_t left = 0;
  for (const auto& order : orders) left += order.size();
  while (left > 0) {
    bool progress = false;
    for (int s = 0; s < S; ++s) {
      const auto& order = orders[static_cast<std::size_t>(s)];
      auto& c = cursor[static_cast<std::size_t>(s)];
      while (c < order.size()) {
        const Instruction& inst = order[c];
        const int k = model_stage(inst, S);
        double ready = start;
        if (inst.kind == InstructionKind::forward && k > 0) ready = forward_end[at(k - 1, inst.microbatch)];
        if (inst.kind == InstructionKind::backward)
          ready = k + 1 < K ? backward_end[at(k + 1, inst.microbatch)] : forward_end[at(k, inst.microbatch)];
        if (ready == unset) break;
        double end = run(s, c, std::max(ready, free_at[static_cast<std::size_t>(s)]));
        free_at[static_cast<std::size_t>(s)] = end;
        (inst.kind == InstructionKind::forward ? forward_end : backward_end)[at(k, inst.microbatch)] = end;
        ++c, --left, progress = true;
      }
    }
    if (!progress) throw std::invalid_argument("the stages' instruction orders wait for each other (deadlock)");
  }
  return free_at.empty() ? start : *std::max_element(free_at.begin(), free_at.end());
}

double pipeline_makespan(const std::vector<std::vector<Instruction>>& orders, int num_microbatches,
                         const std::vector<std::vector<double>>& durations) {
  return run_pipeline(orders, num_microbatches, 0.0, [&](int stage, std::size_t slot, double start) {
    return start + durations[static_cast<std::size_t>(stage)][slot];
  });
}

}  // namespace perseus
