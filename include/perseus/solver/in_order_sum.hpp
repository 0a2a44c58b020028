#pragma once
// The sum of a vector of doubles taken left to right, bit for bit what std::accumulate(begin, end,
// 0.0) gives, kept up to date as single values change. Floating-point addition does not
// associate, so a sum that must round as the reference's in-order sum cannot be patched by the
// difference: it keeps every prefix sum and adds again from the first value that changed, which
// halves the work on average where the planner's steps change values all over the vector.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace perseus {

class InOrderSum {
 public:
  InOrderSum() = default;
  explicit InOrderSum(std::vector<double> values)
      : values_(std::move(values)), prefix_(values_.size() + 1, 0.0), first_stale_(0) {}

  double value(std::size_t i) const { return values_[i]; }
  void set(std::size_t i, double value) {
    values_[i] = value;
    first_stale_ = std::min(first_stale_, i);
  }
  // prefix_[k] is the sum of the first k values; those past the first changed value are summed again.
  double sum() {
    for (std::size_t k = first_stale_; k < values_.size(); ++k) prefix_[k + 1] = prefix_[k] + values_[k];
    first_stale_ = values_.size();
    return prefix_.back();
  }

 private:
  std::vector<double> values_;
  std::vector<double> prefix_{0.0};
  std::size_t first_stale_ = 0;
};

}  // namespace perseus
