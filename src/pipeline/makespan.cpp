#include "perseus/pipeline/makespan.hpp"

#include <algorithm>
#include <stdexcept>

#include "perseus/pipeline/dependencies.hpp"

namespace perseus {

double run_pipeline(const std::vector<std::vector<Instruction>>& orders, int num_microbatches, double start,
                    const std::function<double(int, std::size_t, double)>& run) {
  const int S = static_cast<int>(orders.size()), M = num_microbatches;
  int K = S;  // model stages
  for (const auto& order : orders)
    for (const auto& inst : order)
      for (const auto& part : instruction_parts(inst, S)) K = std::max(K, part.model_stage + 1);
  const DataItems items(K, M);
  const double unset = -1;
  std::vector<double> ready_at(static_cast<std::size_t>(items.size()), unset);
  std::vector<std::size_t> cursor(static_cast<std::size_t>(S), 0);
  std::vector<double> free_at(static_cast<std::size_t>(S), start);
  std::vector<int> produces, needs;
  std::size_t left = 0;
  for (const auto& order : orders) left += order.size();
  while (left > 0) {
    bool progress = false;
    for (int s = 0; s < S; ++s) {
      const auto& order = orders[static_cast<std::size_t>(s)];
      auto& c = cursor[static_cast<std::size_t>(s)];
      while (c < order.size()) {
        items.of(order[c], S, produces, needs);
        double ready = start;
        bool waiting = false;
        for (int item : needs) {
          waiting = waiting || ready_at[static_cast<std::size_t>(item)] == unset;
          ready = std::max(ready, ready_at[static_cast<std::size_t>(item)]);
        }
        if (waiting) break;
        double end = run(s, c, std::max(ready, free_at[static_cast<std::size_t>(s)]));
        free_at[static_cast<std::size_t>(s)] = end;
        for (int item : produces) ready_at[static_cast<std::size_t>(item)] = end;
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
