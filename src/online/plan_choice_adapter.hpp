#pragma once
// The controller's seam to the plan choice under noise (noise_aware_choice.hpp). The controller
// works in the emulator's noise-free terms: its scale turns the noise-free all-max time into the
// measured baseline. The chooser works in expected times under the measured variability, where
// all-max itself takes longer. The seam converts between the two by the ratio of all-max's
// noise-free time to its expected time under the noise (plus the chooser's allowance), so that a
// deadline of x times all-max means x times all-max under the same noise, and the plans it returns
// carry times the controller compares with its noise-free all-max.
#include <algorithm>
#include <utility>

#include "perseus/online/background_planner.hpp"
#include "perseus/online/noise_aware_choice.hpp"

namespace perseus::online::plan_choice {

using online::Variability;
using online::VariabilityEstimator;

struct NoiseSeam {
  NoiseAwareOptions options;
  double to_noisy = 1;  // expected (plus allowance) over noise-free all-max time

  NoiseSeam(const PlanningOutput& plans, const Variability& v, NoiseAwareOptions base) : options(std::move(base)) {
    options.pipelines = std::max(options.pipelines, 1);
    double nominal = plans.all_max().time;
    if (nominal > 0) to_noisy = deadline_for(plans, 1.0, v, options) / nominal;
  }
  ChosenPlan from_noisy(ChosenPlan plan) const {
    plan.time /= to_noisy;
    return plan;
  }
  ChosenPlan to_noisy_terms(ChosenPlan plan) const {
    plan.time *= to_noisy;
    return plan;
  }
};

// Options for `pipelines` pipelines of equal speed.
inline NoiseAwareOptions for_pipelines(int pipelines) {
  NoiseAwareOptions o;
  o.pipelines = pipelines;
  return o;
}

// The cheapest plan that meets `deadline` (noise-free terms) under the measured variability, the
// allowance widened where the noise costs much of the saving (choose_within_allowance); its time in
// the terms of the deadline it was chosen for.
inline AllowedChoice choose_within_allowance(const PlanningOutput& plans, double deadline, const Variability& v,
                                             const NoiseAwareOptions& options) {
  const double nominal = plans.all_max().time;
  NoiseAwareOptions o = options;
  o.pipelines = std::max(o.pipelines, 1);
  if (nominal <= 0 || deadline <= 0) {
    NoiseSeam seam(plans, v, o);
    AllowedChoice out;
    out.plan = seam.from_noisy(online::choose_plan_under_noise(plans, deadline * seam.to_noisy, v, seam.options));
    out.deadline = deadline;
    return out;
  }
  AllowedChoice chosen = online::choose_within_allowance(plans, deadline / nominal, v, o);
  chosen.plan.time *= deadline / chosen.deadline;
  chosen.deadline = deadline;
  return chosen;
}

inline ChosenPlan choose_plan_under_noise(const PlanningOutput& plans, double deadline, const Variability& v,
                                          const NoiseAwareOptions& options) {
  return plan_choice::choose_within_allowance(plans, deadline, v, options).plan;
}

// The cheapest plan faster than `current` that the corrected `deadline` allows; all-max only when
// nothing else meets it.
inline ChosenPlan step_up(const PlanningOutput& plans, const ChosenPlan& current, double deadline, const Variability& v,
                          const NoiseAwareOptions& options) {
  NoiseSeam seam(plans, v, options);
  return seam.from_noisy(
      online::step_up(plans, seam.to_noisy_terms(current), deadline * seam.to_noisy, v, seam.options));
}

}  // namespace perseus::online::plan_choice
