#include "perseus/online/all_max_baseline.hpp"

#include <algorithm>

namespace perseus::online {

void AllMaxBaseline::add(AllMaxRound round, std::optional<std::size_t> keep_last) {
  rounds_.push_back(round);
  if (keep_last && rounds_.size() > *keep_last)
    rounds_.erase(rounds_.begin(), rounds_.begin() + static_cast<long>(rounds_.size() - *keep_last));
}

std::vector<bool> AllMaxBaseline::estimate(const std::function<double(double)>& spread_floor) {
  std::vector<double> times, energies;
  for (const auto& r : rounds_) times.push_back(r.time), energies.push_back(r.energy);
  std::vector<bool> time_kept, energy_kept;
  robust_mean(times, &time_kept);
  robust_mean(energies, &energy_kept);
  std::vector<double> kept_times, kept_energies;
  std::vector<bool> kept(rounds_.size(), false);
  for (std::size_t i = 0; i < rounds_.size(); ++i)
    if (time_kept[i] && energy_kept[i]) {
      kept_times.push_back(times[i]);
      kept_energies.push_back(energies[i]);
      kept[i] = true;
    }
  if (kept_times.empty()) kept_times = times, kept_energies = energies, kept.assign(kept.size(), true);
  time_ = robust_mean(kept_times);
  time_ = at_least_as_wide(time_, kept_times.size(), spread_floor(time_.value));
  energy_ = robust_mean(kept_energies);
  kept_ = static_cast<int>(kept_times.size());
  round_spread_ = {std::max(sample_stddev(kept_times), spread_floor(time_.value)), sample_stddev(kept_energies)};
  rejected_ = static_cast<int>(times.size() - kept_times.size());
  return kept;
}

}  // namespace perseus::online
