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

// Validates the configuration (throws Error with ErrorKind::bad_setting) and the profile's coverage (throws
// InputError), then builds options, cost models and the DAG. Except with the exponential model
// (the reference mode) each operation's options leave out those a faster option matches or beats
// in effective energy (without_costlier_slower).
PlanningProblem make_planning_problem(const Profile& profile, const PlanningConfig& config);

// A frontier as `perseus optimize` and the online planner make it: never empty.
struct PlannedFrontier {
  PlanningProblem problem;
  Frontier frontier;
  // The iteration time (unit times) with every instruction at its fastest option: the shortest
  // any plan reaches, where a frontier that did not stop early ends.
  int fastest_quant_time = 0;
  bool only_the_start = false;  // the solver took no step: the frontier is the starting plan alone
  bool stopped_early() const { return !frontier.interrupted && frontier.points.back().quant_time > fastest_quant_time; }
  // The (stage, kind) operations (spec indices) whose exponential model made the solver stop
  // early, as far as the stop tells: those of the last cut, else every exponential one.
  std::vector<int> stopping_specs() const;
};

// "stage 1 forward": an operation (spec index) as messages name it.
std::string describe_spec(int spec);

// Plans the frontier. With `automatic` (the default cost model), where the solver still stops
// before the fastest iteration time, the exponential models it names (stopping_specs()) are
// replaced by the piecewise-linear hull, saying so in OperationSpec::fallback, and it plans again.
// With `exponential` it stops where the reference stops (SolverOptions::reference_stops). A
// frontier the solver leaves without a point holds the starting plan as its only point.
PlannedFrontier plan_frontier(const Profile& profile, const PlanningConfig& config, SolverOptions options = {});

}  // namespace perseus
