#pragma once
// The emulator: executes a clock plan on the modeled pipeline of a measured profile.
// Each instruction takes the profile's time and energy at its clock, a GPU with nothing to run
// draws P_block, and the iteration ends when the last instruction ends. Every plan and baseline
// is judged by this one meter.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perseus/emulate/cost_tables.hpp"
#include "perseus/emulate/pipeline_walk.hpp"
#include "perseus/pipeline/dag.hpp"
#include "perseus/pipeline/shape.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/profile/time_energy.hpp"

namespace perseus {

struct EmulatorConfig : PipelineShape {
  double p_block = 0;  // watts while waiting
  // When > 0, instruction times are floored to multiples of this, as the planner quantizes
  // them, so that frontier plans are judged in the planner's own time units.
  double quantum = 0;
  // Seconds until a locked clock takes effect: an instruction whose clock differs from the one
  // before it on its stage (the last one of the iteration before, for the first) runs that long
  // at that one's clock (cost_before_change), the rest of its work at its own (all of it at that
  // one's when it is shorter), as a GPU applies a lock some time after the call.
  double clock_latency = 0;
};

// Measured variability (how much an instruction's time varies from one run to the next) is kept
// per stage in two classes, indexed by this: 0 for a forward, 1 for the kinds that compute
// gradients. A split backward's input and weight parts are each backward work; the overlapped
// forward/backward pair is one launch whose longer part is its backward.
inline constexpr std::size_t kVariabilityClasses = 2;
constexpr std::size_t variability_index(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::forward:
      return 0;
    case InstructionKind::backward:
    case InstructionKind::backward_input:
    case InstructionKind::backward_weight:
    case InstructionKind::forward_backward:
      return 1;
  }
  return 1;
}

// Seeded per-instruction multiplicative noise: each instruction's time and energy are scaled by
// one factor drawn from a log-normal distribution with median 1 (its power is unchanged).
struct EmulatorNoise {
  EmulatorNoise() = default;
  EmulatorNoise(double sigma, std::uint64_t seed, std::vector<std::array<double, 2>> stage_sigma = {})
      : sigma(sigma), seed(seed), stage_sigma(std::move(stage_sigma)) {}

  double sigma = 0;
  std::uint64_t seed = 0;
  // Per pipeline stage (GPU), per variability_index(kind): the sigma of that stage's instructions.
  // Empty: `sigma` everywhere. The draws follow node order whatever the sigmas, so one seed gives
  // the same standard-normal draws (and, with equal sigmas, the same run) either way.
  std::vector<std::array<double, 2>> stage_sigma;

  double sigma_of(int stage, InstructionKind kind) const {
    if (stage_sigma.empty()) return sigma;
    const auto s = static_cast<std::size_t>(stage);
    return s < stage_sigma.size() ? stage_sigma[s][variability_index(kind)] : 0.0;
  }
  bool active() const;
};

struct InstructionRun {
  Instruction instruction;
  int frequency = 0;
  double start = 0;
  double duration = 0;
  double energy = 0;
  bool critical = false;  // on the critical path found by the emulator
};

struct StageRun {
  double busy_time = 0;
  double idle_time = 0;  // iteration time - busy time
  double compute_energy = 0;
  double idle_energy = 0;  // idle_time * P_block
};

struct EmulationResult {
  double iteration_time = 0;
  double energy = 0;  // compute energy + idle energy of all stages
  std::vector<StageRun> stages;
  std::vector<std::vector<InstructionRun>> instructions;  // per stage, schedule order
};

class Emulator {
 public:
  // Validates the configuration and the profile's coverage of the stages. Throws Error/InputError.
  Emulator(const Profile& profile, EmulatorConfig config);

  const EmulatorConfig& config() const { return config_; }
  // Instructions of each stage in schedule order: the shape a plan's clock lists must have.
  const std::vector<std::vector<Instruction>>& layout() const { return layout_; }

  // Clocks of (model stage, kind) the profile has, fastest first. The model stage is the stage
  // unless the schedule is interleaved (model_stage()); the Instruction overloads say which.
  const std::vector<int>& clocks(int model_stage, InstructionKind kind) const;
  const std::vector<int>& clocks(const Instruction& inst) const {
    return clocks(model_stage(inst, config_.num_stages), inst.kind);
  }
  // Time and energy of one instruction at a clock; nullopt when the profile has no such row.
  using Cost = TimeEnergy;
  std::optional<Cost> cost(int model_stage, InstructionKind kind, int frequency) const;
  std::optional<Cost> cost(const Instruction& inst, int frequency) const {
    return cost(model_stage(inst, config_.num_stages), inst.kind, frequency);
  }
  // Its cost at the clock before a change of clock, which it runs at until the change takes effect:
  // the profiled row, else an estimate (CostTables::cost_or_estimate).
  std::optional<Cost> cost_before_change(const Instruction& inst, int frequency) const {
    return tables_.cost_or_estimate(model_stage(inst, config_.num_stages), inst.kind, frequency);
  }

  // Runs `frequencies` (per stage, per slot of layout()). Throws Error naming the stage, slot
  // and clock when the plan's shape is wrong or a clock is absent from the profile.
  EmulationResult run(const std::vector<std::vector<int>>& frequencies,
                      const std::optional<EmulatorNoise>& noise = std::nullopt) const;
  // The same without per-instruction detail or critical path: fast enough to judge every point
  // of a 65,000-point frontier.
  TimeEnergy time_and_energy(const std::vector<std::vector<int>>& frequencies) const;
  // Only the checks of run(): throws the same errors for a wrong shape or an unprofiled clock.
  void check_plan(const std::vector<std::vector<int>>& frequencies) const { node_costs(frequencies); }

  // The graph it walks and the costs it reads: for evaluations that batch many runs (noisy_batch.hpp).
  const PipelineWalk& walk() const { return walk_; }
  const CostTables& costs() const { return tables_; }

 private:
  void check_shape(const std::vector<std::vector<int>>& frequencies) const;
  // Per node, its cost at its clock (after a clock change, cost_after_clock_change with `factors`,
  // per node, when given).
  std::vector<Cost> node_costs(const std::vector<std::vector<int>>& frequencies,
                               const std::vector<double>* factors = nullptr) const;

  EmulatorConfig config_;
  std::string source_;
  PipelineWalk walk_;
  std::vector<std::vector<Instruction>> layout_;
  CostTables tables_;
};

}  // namespace perseus
