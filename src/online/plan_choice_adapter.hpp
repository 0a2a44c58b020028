#pragma once
// The controller's seam to the plan choice under noise: the variability of each (stage, kind)
// estimated from measured per-occurrence durations, the plan for a deadline, and the step to a
// faster plan. Here the choice is the noise-free one (choose_plan) with the variability measured
// and shown; a noise-aware chooser with the same calls replaces it.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "perseus/online/background_planner.hpp"
#include "perseus/pipeline/schedule.hpp"

namespace perseus::online::plan_choice {

struct Variability {
  std::vector<std::array<double, 2>> sigma;  // [stage][0 forward, 1 backward]: log-normal sigma of one instruction's time
  double max() const {
    double out = 0;
    for (const auto& s : sigma) out = std::max({out, s[0], s[1]});
    return out;
  }
};

// Each sample set: the durations of one (stage, kind) at one clock within one round, so that the
// clock and the round's conditions cancel; per set the standard deviation of log durations, and
// per (stage, kind) the median over its sets (one disturbed set does not count).
class VariabilityEstimator {
 public:
  explicit VariabilityEstimator(int stages) : sets_(static_cast<std::size_t>(std::max(stages, 0))) {}
  void add(int stage, InstructionKind kind, const std::vector<double>& durations) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= sets_.size() || durations.size() < 3) return;
    double mean = 0;
    for (double d : durations) mean += std::log(std::max(d, 1e-12));
    mean /= double(durations.size());
    double var = 0;
    for (double d : durations) var += std::pow(std::log(std::max(d, 1e-12)) - mean, 2);
    var /= double(durations.size() - 1);
    sets_[static_cast<std::size_t>(stage)][kind == InstructionKind::forward ? 0 : 1].push_back(std::sqrt(var));
  }
  Variability estimate() const {
    Variability v;
    for (const auto& stage : sets_) {
      std::array<double, 2> s{0, 0};
      for (int k = 0; k < 2; ++k) {
        auto values = stage[static_cast<std::size_t>(k)];
        if (values.empty()) continue;
        std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2), values.end());
        s[static_cast<std::size_t>(k)] = values[values.size() / 2];
      }
      v.sigma.push_back(s);
    }
    return v;
  }

 private:
  std::vector<std::array<std::vector<double>, 2>> sets_;
};

inline ChosenPlan choose_plan_under_noise(const PlanningOutput& plans, double deadline, const Variability&) {
  return choose_plan(plans, deadline);
}

// The cheapest plan that the corrected deadline allows, at least a little faster than `current`;
// all-max only when the model has nothing faster than `current` but it.
inline ChosenPlan step_up(const PlanningOutput& plans, const ChosenPlan& current, double deadline, const Variability& v) {
  ChosenPlan fastest = fastest_plan(plans);
  if (current.time <= fastest.time) return all_max(plans);
  ChosenPlan next = choose_plan_under_noise(plans, std::min(deadline, current.time * (1 - 1e-3)), v);
  return next.time < current.time ? next : fastest;
}

}  // namespace perseus::online::plan_choice
