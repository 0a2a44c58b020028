#include "perseus/protocol/physical_bounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "perseus/util/safe_text.hpp"

namespace perseus::protocol {

namespace {

// Sum of one iteration's values over every instruction of a breakdown; a problem names the first
// value that is not finite or is negative.
std::string sum_iteration(const Breakdown& breakdown, std::size_t iteration, const char* what, const char* unit,
                          double& sum) {
  sum = 0;
  for (const auto& [name, rows] : breakdown) {
    if (iteration >= rows.size()) continue;
    for (double v : rows[iteration]) {
      if (!std::isfinite(v) || v < 0)
        return fmt::format("{} of '{}' in iteration {} is {} {}", what, safe_text(name, 100), iteration, v, unit);
      sum += v;
    }
  }
  return "";
}

}  // namespace

std::string oversized_result(const ProfilingResult& result, const RankInfo& rank) {
  const std::set<std::string> distinct(rank.pipe_schedule.begin(), rank.pipe_schedule.end());
  const std::size_t most_names = distinct.size() + kMaxUnscheduledInstructions;
  const std::size_t most_per_iteration = rank.pipe_schedule.size() + kMaxUnscheduledInstructions;
  for (const auto& [field, breakdown] :
       {std::pair{"time_breakdown", &result.time_breakdown}, std::pair{"energy_breakdown", &result.energy_breakdown}}) {
    if (breakdown->size() > most_names)
      return fmt::format(
          "field '{}': {} instructions named; rank {} registered {} distinct instructions (at most {} others may be "
          "measured)",
          field, breakdown->size(), rank.rank, distinct.size(), kMaxUnscheduledInstructions);
    std::vector<std::size_t> per_iteration;
    for (const auto& [name, rows] : *breakdown) {
      if (per_iteration.size() < rows.size()) per_iteration.resize(rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i) per_iteration[i] += rows[i].size();
    }
    for (std::size_t i = 0; i < per_iteration.size(); ++i)
      if (per_iteration[i] > most_per_iteration)
        return fmt::format(
            "field '{}': iteration {} holds {} measurements; rank {} registered {} instructions per iteration (at most "
            "{} others may be measured)",
            field, i, per_iteration[i], rank.rank, rank.pipe_schedule.size(), kMaxUnscheduledInstructions);
  }
  return "";
}

double max_power_w(const RankInfo& rank) { return rank.max_power_w.value_or(kMaxPlausibleGpuPowerW); }

std::optional<double> plausible_blocking_power(double watts, const std::vector<RankInfo>& ranks) {
  double bound = kMaxPlausibleGpuPowerW;
  for (const auto& rank : ranks) bound = std::min(bound, max_power_w(rank));
  if (!std::isfinite(watts) || watts < 0 || watts > bound * kPowerSlack) return std::nullopt;
  return watts;
}

std::string implausible_result(const ProfilingResult& result, double max_power) {
  if (result.iter_time.empty())
    return "no iteration was measured (the client drops an iteration in which a GPU read failed, e.g. while perseus "
           "gpud restarted)";
  if (result.iter_time.size() != result.iter_energy.size())
    return fmt::format("{} iteration times but {} iteration energies", result.iter_time.size(),
                       result.iter_energy.size());
  for (std::size_t i = 0; i < result.iter_time.size(); ++i) {
    const double t = result.iter_time[i], e = result.iter_energy[i];
    if (!std::isfinite(t) || t <= 0) return fmt::format("iteration {} took {} s", i, t);
    if (t > kMaxMeasuredSeconds) return fmt::format("iteration {} took {} s, longer than a day", i, t);
    if (!std::isfinite(e) || e <= 0) return fmt::format("iteration {} used {} J", i, e);
    if (e / t > max_power * kPowerSlack)
      return fmt::format(
          "iteration {} drew {:.0f} W on average ({} J in {} s), above the GPU's maximum power limit "
          "of {:.0f} W",
          i, e / t, e, t, max_power);
    double busy_time = 0, busy_energy = 0;
    if (auto problem = sum_iteration(result.time_breakdown, i, "the time", "s", busy_time); !problem.empty())
      return problem;
    if (auto problem = sum_iteration(result.energy_breakdown, i, "the energy", "J", busy_energy); !problem.empty())
      return problem;
    // The client times instructions one after another within the iteration, with the same clock and counter.
    if (busy_time > t * 1.01 + 1e-3)
      return fmt::format("the instructions of iteration {} took {} s in all, longer than the iteration ({} s)", i,
                         busy_time, t);
    if (busy_energy > e * 1.01 + 1e-3)
      return fmt::format("the instructions of iteration {} used {} J in all, more than the iteration ({} J)", i,
                         busy_energy, e);
  }
  return "";
}

}  // namespace perseus::protocol
