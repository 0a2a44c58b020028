#include "perseus/protocol/round_mean.hpp"

namespace perseus::protocol {

std::size_t first_counted_iteration(std::size_t iterations) {
  return iterations > kWarmUpIterations ? kWarmUpIterations : 0;
}

double round_mean(const std::vector<double>& per_iteration) {
  const std::size_t first = first_counted_iteration(per_iteration.size());
  if (per_iteration.size() == first) return 0;
  double sum = 0;
  for (std::size_t i = first; i < per_iteration.size(); ++i) sum += per_iteration[i];
  return sum / double(per_iteration.size() - first);
}

}  // namespace perseus::protocol
