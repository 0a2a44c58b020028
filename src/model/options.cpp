#include "perseus/model/options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "perseus/util/error.hpp"
#include "perseus/util/pyfloat.hpp"

namespace perseus {

OperationOptions::OperationOptions(std::vector<ExecutionOption> options, bool used_noise_factor)
    : options_(std::move(options)), used_noise_factor_(used_noise_factor) {
  if (options_.empty()) throw Error("an operation needs at least one execution option");
}

const ExecutionOption& OperationOptions::option_for(int duration) const {
  // options_ is sorted by quant_time descending: the first one that fits is the slowest.
  for (const auto& option : options_) {
    if (option.quant_time <= duration) return option;
  }
  return options_.back();
}

std::vector<ExecutionOption> pareto_options(const std::vector<ProfileRow>& rows, double unit_time,
                                            double noise_factor) {
  std::vector<ExecutionOption> all;
  all.reserve(rows.size());
  for (const auto& row : rows) {
    ExecutionOption option;
    option.frequency = row.frequency;
    option.real_time = row.time;
    option.energy = row.energy;
    const double units = py_floordiv(row.time, unit_time);
    if (!(units < 2147483647.0))  // checked before the cast, which would be undefined
      throw SettingError("unit_time",
                         fmt::format("stage {} {} at {} MHz takes {} s, {:.4g} units of unit_time {} s: beyond the "
                                     "planner's 2^31-1 time units; use a larger unit_time",
                                     row.stage, to_string(row.kind), row.frequency, row.time, units, unit_time));
    option.quant_time = static_cast<int>(units);
    all.push_back(option);
  }
  // Stable sorts keep the reference planner's tie-breaking among equal keys.
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.real_time > b.real_time; });
  // An option is dominated when some option is strictly faster and strictly cheaper than its
  // (scaled) time and energy: when the cheapest of the options strictly faster than t costs less
  // than e. Times ascending with a running minimum of energy answer that by binary search, in
  // O(n log n) instead of comparing every pair.
  std::vector<double> times(all.size()), cheapest(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) times[i] = all[all.size() - 1 - i].real_time;  // ascending
  for (std::size_t i = 0; i < all.size(); ++i) {
    const double e = all[all.size() - 1 - i].energy;
    cheapest[i] = i == 0 ? e : std::min(cheapest[i - 1], e);
  }
  std::vector<ExecutionOption> pareto;
  for (const auto& option : all) {
    const double t = option.real_time * noise_factor;
    const double e = option.energy * noise_factor;
    const auto faster = static_cast<std::size_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
    const bool dominated = faster > 0 && cheapest[faster - 1] < e;
    if (!dominated) pareto.push_back(option);
  }
  // Quantization rounds down, so among equal quant_times the most expensive option is the one
  // whose real time is closest to its quantized time.
  std::stable_sort(pareto.begin(), pareto.end(), [](const auto& a, const auto& b) { return a.energy > b.energy; });
  std::vector<ExecutionOption> unique;
  std::set<int> seen;
  for (const auto& option : pareto) {
    if (seen.insert(option.quant_time).second) unique.push_back(option);
  }
  std::stable_sort(unique.begin(), unique.end(),
                   [](const auto& a, const auto& b) { return a.quant_time > b.quant_time; });
  return unique;
}

OperationOptions build_options(const std::vector<ProfileRow>& rows, const OptionsConfig& config) {
  auto options = pareto_options(rows, config.unit_time, 1.0);
  bool used_noise = false;
  // Few survivors usually means noisy measurements: tolerate noise_factor of slack.
  if (options.size() <= 3 && config.noise_factor != 1.0) {
    options = pareto_options(rows, config.unit_time, config.noise_factor);
    used_noise = true;
  }
  for (auto& option : options) {
    option.effective_energy = option.energy - config.p_block * option.quant_time * config.unit_time;
  }
  return OperationOptions(std::move(options), used_noise);
}

OperationOptions without_costlier_slower(const OperationOptions& options) {
  const auto& all = options.options();  // slowest first
  std::vector<ExecutionOption> kept;
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (kept.empty() || it->effective_energy < kept.back().effective_energy) kept.push_back(*it);
  std::reverse(kept.begin(), kept.end());
  return OperationOptions(std::move(kept), options.used_noise_factor());
}

OperationOptions faster_within_quanta(const OperationOptions& options, const std::vector<ProfileRow>& rows,
                                      const OptionsConfig& config) {
  std::vector<ExecutionOption> result = options.options();
  for (auto& option : result) {
    const ProfileRow* best = nullptr;
    for (const auto& row : rows) {
      if (py_floordiv(row.time, config.unit_time) != option.quant_time) continue;
      if (!(row.time < option.real_time && row.energy <= option.energy)) continue;
      if (!best || row.time < best->time || (row.time == best->time && row.energy < best->energy)) best = &row;
    }
    if (!best) continue;
    option.frequency = best->frequency;
    option.real_time = best->time;
    option.energy = best->energy;
    option.effective_energy = best->energy - config.p_block * option.quant_time * config.unit_time;
  }
  return OperationOptions(std::move(result), options.used_noise_factor());
}

}  // namespace perseus
