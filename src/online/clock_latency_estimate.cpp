#include "perseus/online/clock_latency_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace perseus::online {

bool ClockLatencyFit::clear(double smallest, double chance) const {
  // Robbins' normal mixture boundary in standard errors, with the mixture's scale at 8 rounds.
  constexpr double kScale = 8;
  const double n = double(rounds);
  const double z = std::sqrt((1 + kScale / n) * (std::log(1 + n / kScale) + 2 * std::log(1 / chance)));
  return rounds > 0 && above(z, smallest);
}

bool ClockLatencyFit::above(double z, double smallest) const {
  return latency >= std::max(smallest, z * standard_error);
}

void ClockLatencyEstimate::add(const ClockLatencySample& sample) {
  samples_.push_back({sample, round_});
  if (samples_.size() > kept_)
    samples_.erase(samples_.begin(), samples_.begin() + static_cast<long>(samples_.size() - kept_));
}

void ClockLatencyEstimate::end_round() { ++round_; }

std::optional<ClockLatencyFit> ClockLatencyEstimate::fit(std::size_t fewest_samples, std::size_t fewest_rounds) const {
  if (samples_.size() < std::max<std::size_t>(fewest_samples, 2)) return std::nullopt;
  double xx = 0, xy = 0;
  for (const auto& [s, round] : samples_) xx += s.share * s.share, xy += s.share * s.excess;
  if (xx <= 0) return std::nullopt;
  ClockLatencyFit out;
  out.latency = xy / xx;
  out.samples = samples_.size();
  // Clustered by round: the sum over rounds of (the round's share-weighted residuals) squared.
  double clustered = 0, in_round = 0;
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    const auto& [s, round] = samples_[i];
    in_round += s.share * (s.excess - out.latency * s.share);
    if (i + 1 == samples_.size() || samples_[i + 1].round != round) {
      clustered += in_round * in_round, in_round = 0;
      ++out.rounds;
    }
  }
  if (out.rounds < std::max<std::size_t>(fewest_rounds, 2)) return std::nullopt;
  // A baseline reference's error, the same in every sample compared with it, weighs by the sum of
  // their shares.
  std::map<int, std::pair<double, double>> by_reference;  // shares, the error
  for (const auto& [s, round] : samples_)
    if (s.baseline_reference) {
      auto& [shares, error] = by_reference[s.baseline_reference];
      shares += s.share, error = s.reference_error;
    }
  double persistent = 0;
  for (const auto& [reference, value] : by_reference) persistent += std::pow(value.first * value.second, 2);
  const double rounds = double(out.rounds);
  out.standard_error = std::sqrt(clustered * rounds / (rounds - 1) + persistent) / xx;
  return out;
}

}  // namespace perseus::online
