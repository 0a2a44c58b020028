#pragma once
// What the files of TurnkeyController share and nothing else includes: the variability estimate
// behind its pointer, the choice types they name, and the check band that profiling and the
// conditions both read.
#include "perseus/online/turnkey_controller.hpp"
#include "plan_choice_adapter.hpp"
#include "turnkey_choice.hpp"

namespace perseus::online {

struct VariabilityState {
  explicit VariabilityState(int stages) : estimator(stages) {}
  plan_choice::VariabilityEstimator estimator;
};

namespace turnkey_detail {

using choice::Assignment;
using choice::ChoiceContext;
using choice::TargetChoice;

// A check round while profiling runs every instruction at the top clock: a move of the cluster's
// conditions by more than this is no noise of it. The clocks measured before it are measured again,
// and a plan deployed after it starts at its conditions.
inline constexpr double kCheckBand = 0.01;

}  // namespace turnkey_detail

}  // namespace perseus::online
