#include "perseus/online/all_max_baseline.hpp"

#include <algorithm>
#include <cmath>

namespace perseus::online {

void AllMaxBaseline::add(AllMaxRound round, std::optional<std::size_t> keep_last) {
  rounds_.push_back(round);
  if (keep_last && rounds_.size() > *keep_last)
    rounds_.erase(rounds_.begin(), rounds_.begin() + static_cast<long>(rounds_.size() - *keep_last));
}

namespace {

// How many standard errors apart the mean times of rounds [a, b) and [b, e) are, in the rounds' spread
// within the two (no narrower than `floor`; with no spread at all, as where rounds repeat one time,
// any step is clear).
double step_size(const std::vector<double>& times, std::size_t a, std::size_t b, std::size_t e, double floor) {
  const auto mean = [&](std::size_t from, std::size_t to) {
    double sum = 0;
    for (std::size_t i = from; i < to; ++i) sum += times[i];
    return sum / static_cast<double>(to - from);
  };
  const double before = mean(a, b), after = mean(b, e);
  double squares = 0;
  for (std::size_t i = a; i < e; ++i) {
    const double m = i < b ? before : after;
    squares += (times[i] - m) * (times[i] - m);
  }
  const auto na = static_cast<double>(b - a), nb = static_cast<double>(e - b);
  const double spread = std::max({std::sqrt(squares / (na + nb - 2)), floor, 1e-12 * std::abs(before)});
  return std::abs(after - before) / (spread * std::sqrt(1 / na + 1 / nb));
}

// Where the rounds' mean time steps clearly: the first round of the last such step, 0 if none. A step
// is a split with enough rounds on each side whose means differ by many standard errors, the rounds
// after it against all those before or against the last few before (where a slow spell that began
// and ended among the rounds mixes two paces before it); the largest is taken, and the rounds after it
// are searched again.
std::size_t last_level_start(const std::vector<double>& times, double floor) {
  constexpr std::size_t kSide = 5;   // rounds on each side of a step, at least
  constexpr std::size_t kNear = 10;  // the rounds just before a step that it is also compared with
  constexpr double kClearStep = 6;   // standard errors: the largest of ~60 splits of noise stays under it
  std::size_t start = 0;
  for (;;) {
    const std::size_t n = times.size() - start;
    if (n < 2 * kSide) return start;
    double best = 0;
    std::size_t best_k = 0;
    for (std::size_t k = start + kSide; k + kSide <= times.size(); ++k) {
      const double t = std::max(step_size(times, start, k, times.size(), floor),
                                step_size(times, std::max(start, k - std::min(k, kNear)), k, times.size(), floor));
      if (t > best) best = t, best_k = k;
    }
    if (best < kClearStep) return start;
    start = best_k;
  }
}

}  // namespace

void AllMaxBaseline::forget_before_level() {
  rounds_.erase(rounds_.begin(), rounds_.begin() + std::min<long>(shifted_, static_cast<long>(rounds_.size())));
  shifted_ = 0;
}

std::vector<bool> AllMaxBaseline::estimate(const std::function<double(double)>& spread_floor, bool latest_level) {
  std::vector<double> times, energies;
  for (const auto& r : rounds_) times.push_back(r.time), energies.push_back(r.energy);
  std::size_t first = 0;
  if (latest_level && !times.empty()) first = last_level_start(times, spread_floor(robust_mean(times).value));
  shifted_ = static_cast<int>(first);
  const std::vector<double> level_times(times.begin() + static_cast<long>(first), times.end());
  const std::vector<double> level_energies(energies.begin() + static_cast<long>(first), energies.end());
  std::vector<bool> time_kept, energy_kept;
  robust_mean(level_times, &time_kept);
  robust_mean(level_energies, &energy_kept);
  time_kept.insert(time_kept.begin(), first, false);
  energy_kept.insert(energy_kept.begin(), first, false);
  std::vector<double> kept_times, kept_energies;
  std::vector<bool> kept(rounds_.size(), false);
  for (std::size_t i = 0; i < rounds_.size(); ++i)
    if (time_kept[i] && energy_kept[i]) {
      kept_times.push_back(times[i]);
      kept_energies.push_back(energies[i]);
      kept[i] = true;
    }
  if (kept_times.empty()) kept_times = times, kept_energies = energies, kept.assign(kept.size(), true), shifted_ = 0;
  time_ = robust_mean(kept_times);
  time_ = at_least_as_wide(time_, kept_times.size(), spread_floor(time_.value));
  energy_ = robust_mean(kept_energies);
  kept_ = static_cast<int>(kept_times.size());
  round_spread_ = {std::max(sample_stddev(kept_times), spread_floor(time_.value)), sample_stddev(kept_energies)};
  rejected_ = static_cast<int>(times.size() - kept_times.size()) - shifted_;
  return kept;
}

}  // namespace perseus::online
