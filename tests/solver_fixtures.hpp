#pragma once
// Planning problems for tests: hand-made options, and synthetic-GPU profiles.
#include "perseus/pipeline/schedule.hpp"
#include "perseus/profile/backward_split.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/solver/planning.hpp"

namespace perseus::fixtures {

inline OperationSpec pwl_spec(const std::vector<std::pair<int, double>>& points) {
  std::vector<ExecutionOption> options;
  for (const auto& [q, e] : points) {
    ExecutionOption o;
    o.frequency = 1000 + 10 * q;
    o.quant_time = q;
    o.effective_energy = e;
    options.push_back(o);
  }
  OperationSpec spec{OperationOptions(options), nullptr, ""};
  spec.model = std::make_shared<PiecewiseLinearModel>(options);
  return spec;
}

inline PlanningProblem synthetic_problem(int stages, int microbatches, double noise, std::uint64_t seed,
                                         CostModelKind model = CostModelKind::exponential,
                                         ScheduleKind schedule = ScheduleKind::one_f_one_b, int virtual_stages = 1) {
  SyntheticGpu gpu;
  gpu.num_stages = stages * virtual_stages;  // one profile stage per model stage
  gpu.noise = noise;
  gpu.seed = seed;
  gpu.forward_time = 0.02 + 0.005 * static_cast<double>(seed % 3);
  Profile profile = parse_profile(synthetic_profile_csv(gpu), "synthetic.csv");
  // Zero-bubble schedules run the backward's two parts: split it, the input gradient taking half.
  if (splits_backward(schedule)) profile = split_backward(profile, 0.5);
  PlanningConfig config;
  config.num_stages = stages;
  config.num_microbatches = microbatches;
  config.unit_time = 0.001;
  config.p_block = 70;
  config.cost_model = model;
  config.schedule = schedule;
  config.virtual_stages = virtual_stages;
  return make_planning_problem(profile, config);
}

}  // namespace perseus::fixtures
