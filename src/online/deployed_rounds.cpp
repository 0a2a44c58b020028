#include "perseus/online/deployed_rounds.hpp"

#include <algorithm>
#include <cmath>

namespace perseus::online {

namespace {

// The rounds on the current plans that measured() averages.
constexpr std::size_t kOnPlansKept = 10;

// Sum over sum (the saving over a window is its energy over what all-max would have used in it: a
// round of a straggler, whose all-max costs more, weighs more), its interval from the rounds'
// deviations from that ratio, widened by the baseline's relative uncertainty.
Estimate ratio_estimate(const std::vector<double>& measured, const std::vector<double>& reference,
                        double baseline_relative_half_width) {
  double sum = 0, reference_sum = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) sum += measured[i], reference_sum += reference[i];
  const double ratio = sum / reference_sum;
  const std::size_t n = measured.size();
  double spread = 0;
  if (n > 1) {
    double squares = 0;
    for (std::size_t i = 0; i < n; ++i) squares += std::pow(measured[i] - ratio * reference[i], 2);
    const double mean_reference = reference_sum / double(n);
    spread = t_quantile(n) * std::sqrt(squares / double(n * (n - 1))) / mean_reference;
  }
  double half = std::sqrt(spread * spread + std::pow(ratio * baseline_relative_half_width, 2));
  return {ratio, ratio - half, ratio + half};
}

}  // namespace

void DeployedRounds::add(double time, double energy, int iterations, Reference reference) {
  recent_.push_back({time, energy, std::move(reference), iterations});
  energy_saved_ += (recent_.back().reference.energy - energy) * iterations;
  iterations_ += iterations;
  if (recent_.size() > std::max<std::size_t>(report_rounds_, 1)) recent_.erase(recent_.begin());
}

void DeployedRounds::last_ran_the_plans() {
  on_plans_.push_back(recent_.back());
  if (on_plans_.size() > kOnPlansKept) on_plans_.erase(on_plans_.begin());
}

void DeployedRounds::rebase(double time_factor, double energy_factor) {
  for (auto* rounds : {&on_plans_, &recent_})
    for (auto& r : *rounds) r.reference.iteration_time *= time_factor, r.reference.energy *= energy_factor;
}

void DeployedRounds::restate(std::size_t rounds, const Reference& reference, double oldest_share) {
  restate(std::vector<Reference>(std::min(rounds, recent_.size()), reference), oldest_share);
}

void DeployedRounds::restate(const std::vector<Reference>& references, double oldest_share) {
  const std::size_t count = std::min(references.size(), recent_.size());
  const std::size_t first = recent_.size() - count;
  for (std::size_t k = 0; k < count; ++k) {
    const Reference& reference = references[references.size() - count + k];
    Round& round = recent_[first + k];
    Reference now = reference;
    if (k == 0 && oldest_share < 1) {
      const double share = std::max(0.0, oldest_share);
      const Reference& was = round.reference;
      now.iteration_time = was.iteration_time + share * (reference.iteration_time - was.iteration_time);
      now.energy = was.energy + share * (reference.energy - was.energy);
      now.conditions = was.conditions + share * (reference.conditions - was.conditions);
    }
    energy_saved_ += (now.energy - round.reference.energy) * round.iterations;
    round.reference = std::move(now);
  }
}

std::optional<MeasuredRounds> DeployedRounds::measured() const {
  if (on_plans_.empty()) return std::nullopt;
  MeasuredRounds out;
  for (const auto& r : on_plans_) out.iteration_time += r.time, out.energy += r.energy;
  out.rounds = static_cast<int>(on_plans_.size());
  out.iteration_time /= out.rounds;
  out.energy /= out.rounds;
  return out;
}

std::optional<Estimate> DeployedRounds::saving(double baseline_relative_half_width) const {
  if (recent_.empty()) return std::nullopt;
  std::vector<double> energy, reference;
  for (const auto& r : recent_) energy.push_back(r.energy), reference.push_back(r.reference.energy);
  Estimate e = ratio_estimate(energy, reference, baseline_relative_half_width);
  return Estimate{1 - e.value, 1 - e.high, 1 - e.low};
}

std::optional<Estimate> DeployedRounds::slowdown(double baseline_relative_half_width) const {
  if (recent_.empty()) return std::nullopt;
  std::vector<double> time, reference;
  for (const auto& r : recent_) time.push_back(r.time), reference.push_back(r.reference.iteration_time);
  Estimate e = ratio_estimate(time, reference, baseline_relative_half_width);
  return Estimate{e.value - 1, e.low - 1, e.high - 1};
}

}  // namespace perseus::online
