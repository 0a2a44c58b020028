#include "perseus/online/statistics.hpp"

#include <algorithm>
#include <cmath>

namespace perseus::online {

double t_quantile(std::size_t n) {
  static const double t[] = {0, 12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23};
  return n >= 2 && n - 1 <= 10 ? t[n - 1] : 1.96;
}

Estimate at_least_as_wide(Estimate e, std::size_t n, double floor_sd) {
  if (n == 0 || floor_sd <= 0) return e;
  double half = std::max((e.high - e.low) / 2, t_quantile(n) * floor_sd / std::sqrt(double(n)));
  return {e.value, e.value - half, e.value + half};
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double median_of_others(const std::vector<double>& values, std::size_t skip, std::optional<std::size_t> also) {
  std::vector<double> others;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (i != skip && i != also) others.push_back(values[i]);
  return median(std::move(others));
}

double sample_stddev(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  double mean = 0, var = 0;
  for (double v : values) mean += v;
  mean /= double(values.size());
  for (double v : values) var += (v - mean) * (v - mean);
  return std::sqrt(var / double(values.size() - 1));
}

double relative_standard_error(const std::vector<std::vector<double>>& sets) {
  double squares = 0;
  std::size_t values = 0, freedom = 0;
  for (const auto& set : sets) {
    std::vector<double> logs;
    for (double v : set)
      if (v > 0 && std::isfinite(v)) logs.push_back(std::log(v));
    if (logs.size() < 2) continue;
    double mean = 0;
    for (double l : logs) mean += l;
    mean /= static_cast<double>(logs.size());
    for (double l : logs) squares += (l - mean) * (l - mean);
    values += logs.size();
    freedom += logs.size() - 1;
  }
  if (freedom == 0) return 0;
  return std::sqrt(squares / static_cast<double>(freedom) / static_cast<double>(values));
}

Estimate mean_interval(const std::vector<double>& values) {
  Estimate out;
  if (values.empty()) return out;
  for (double v : values) out.value += v;
  out.value /= double(values.size());
  const double half =
      values.size() > 1 ? t_quantile(values.size()) * sample_stddev(values) / std::sqrt(double(values.size())) : 0;
  out.low = out.value - half;
  out.high = out.value + half;
  return out;
}

Estimate robust_mean(const std::vector<double>& values, std::vector<bool>* kept) {
  if (kept) kept->assign(values.size(), false);
  if (values.empty()) return {};
  double mid = median(values);
  std::vector<double> deviations;
  for (double v : values) deviations.push_back(std::abs(v - mid));
  // A floor on the spread: rounds that agree to a part in 10^4 are all kept.
  double spread = std::max(1.4826 * median(deviations), 1e-4 * std::abs(mid));
  std::vector<double> used;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (std::abs(values[i] - mid) <= 3.5 * spread) {
      used.push_back(values[i]);
      if (kept) (*kept)[i] = true;
    }
  return mean_interval(used);
}

}  // namespace perseus::online
