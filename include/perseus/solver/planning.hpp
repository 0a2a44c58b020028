#pragma once
// From a profile to a planning problem: options and cost models per (stage, instruction), and
// the pipeline DAG for the chosen schedule.
#include <string>

#include "perseus/model/cost_model.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/solver/phillips_dessouky.hpp"

namespace perseus {

struct PlanningConfig {
  int num_stages = 0;
  int num_microbatches = 0;
  double unit_time = 0.001;
  double p_block = 0;
  double noise_factor = 0.95;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  std::vector<int> extra_forwards;  // per stage, 1f1b only (EnvPipe's reordered schedule)
  int virtual_stages = 1;           // model chunks per stage, interleaved only: the profile has S * V stages
  CostModelKind cost_model = CostModelKind::automatic;
};

// Validates the configuration (throws Error with kExitUsage) and the profile's coverage (throws
// InputError), then builds options, cost models and the DAG.
PlanningProblem make_planning_problem(const Profile& profile, const PlanningConfig& config);

}  // namespace perseus
