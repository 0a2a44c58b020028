#pragma once
// From a profile to a planning problem: options and cost models per (stage, instruction), and
// the pipeline DAG for the chosen schedule.
#include <string>

#include "perseus/model/cost_model.hpp"
#include "perseus/pipeline/shape.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/solver/phillips_dessouky.hpp"

namespace perseus {

struct PlanningConfig : PipelineShape {
  double unit_time = 0.001;
  double p_block = 0;
  double noise_factor = 0.95;
  CostModelKind cost_model = CostModelKind::automatic;
};

// Validates the configuration (throws Error with kExitUsage) and the profile's coverage (throws
// InputError), then builds options, cost models and the DAG.
PlanningProblem make_planning_problem(const Profile& profile, const PlanningConfig& config);

}  // namespace perseus
