#pragma once
// The few statistics the turnkey loop decides with: means with 95% intervals, robust to outlying
// rounds, and medians.
#include <cstddef>
#include <optional>
#include <vector>

namespace perseus::online {

// A measured quantity with its uncertainty.
struct Estimate {
  double value = 0;
  double low = 0, high = 0;  // a 95% interval
};

// The mean of `values` without outliers (further than 3.5 scaled MADs from the median), with a 95%
// interval from their spread; `kept` says which were used.
Estimate robust_mean(const std::vector<double>& values, std::vector<bool>* kept = nullptr);

// The plain mean of `values` with a 95% interval (t quantiles for few).
Estimate mean_interval(const std::vector<double>& values);

// `e` (the mean of n values) with its interval at least as wide as values of standard deviation
// `floor_sd` give: a few rounds that agree by chance must not look precise.
Estimate at_least_as_wide(Estimate e, std::size_t n, double floor_sd);

double median(std::vector<double> values);  // 0 when empty
// The median of `values` but the one at `skip` (and at `also`, when given): one pipeline against the
// others. 0 when none is left.
double median_of_others(const std::vector<double>& values, std::size_t skip,
                        std::optional<std::size_t> also = std::nullopt);
double sample_stddev(const std::vector<double>& values);
// The standard error of the mean of all values in `sets`, relative to that mean: from the spread of
// their logarithms within each set, pooled (sets may differ in level, as GPUs of different speeds
// do). 0 where no set has two positive values.
double relative_standard_error(const std::vector<std::vector<double>>& sets);
// The 95% two-sided t quantile for the mean of n values (1.96 for many).
double t_quantile(std::size_t n);

}  // namespace perseus::online
