#include "perseus/online/straggler_detector.hpp"

#include <algorithm>
#include <cmath>

#include "perseus/online/statistics.hpp"

namespace perseus::online {

bool StragglerDetector::suspects() const {
  for (std::size_t d = 0; d < normal_rounds_.size(); ++d)
    if (normal_rounds_[d] == 0 && !(current_ && current_->pipeline == static_cast<int>(d))) return true;
  return false;
}

void StragglerDetector::reset() {
  slow_rounds_.clear();
  normal_rounds_.clear();
  current_.reset();
}

bool StragglerDetector::observe(const std::vector<double>& ratios) {
  if (ratios.size() < 2) return false;  // a lone pipeline has nobody to slow down for
  if (slow_rounds_.size() != ratios.size()) {
    slow_rounds_.assign(ratios.size(), 0);
    normal_rounds_.assign(ratios.size(), 0);
  }
  std::vector<double> relative(ratios.size());
  for (std::size_t d = 0; d < ratios.size(); ++d) {
    relative[d] = ratios[d] / median_of_others(ratios, d);
    bool slow = relative[d] > 1 + options_.threshold;
    bool normal = relative[d] <= 1 + options_.threshold / 2;
    slow_rounds_[d] = slow ? slow_rounds_[d] + 1 : 0;
    normal_rounds_[d] = normal ? normal_rounds_[d] + 1 : 0;
  }
  if (current_) {
    auto d = static_cast<std::size_t>(current_->pipeline);
    if (normal_rounds_[d] >= options_.clear_rounds) {
      current_.reset();
      return true;
    }
    if (slow_rounds_[d] >= options_.rounds &&
        std::abs(relative[d] - current_->slowdown) > options_.threshold * current_->slowdown) {
      current_->slowdown = relative[d];
      return true;
    }
    return false;
  }
  std::optional<std::size_t> slowest;
  for (std::size_t d = 0; d < ratios.size(); ++d)
    if (slow_rounds_[d] >= options_.rounds && (!slowest || relative[d] > relative[*slowest])) slowest = d;
  if (!slowest) return false;
  current_ = Straggler{static_cast<int>(*slowest), relative[*slowest]};
  return true;
}

}  // namespace perseus::online
