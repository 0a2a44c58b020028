#pragma once
// The profile's cost of every instruction at every clock, per (model stage, kind): the one table
// the emulator, its noisy batches and the simulated cluster's GPUs read, so that how a profile row
// becomes an instruction's time and energy is written once.
#include <cstddef>
#include <optional>
#include <vector>

#include "perseus/pipeline/shape.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/profile/time_energy.hpp"

namespace perseus {

class CostTables {
 public:
  // Time and energy of one (model stage, kind) per profiled clock, fastest first.
  struct Table {
    std::vector<int> clocks;        // fastest first
    std::vector<TimeEnergy> costs;  // parallel to clocks
    // The profiled clock at or next below `clock` (the slowest one when `clock` is below them all),
    // as an index into clocks: what a GPU runs when a clock between two profiled ones is locked.
    std::size_t at_or_below(int clock) const;
  };

  CostTables() = default;
  // The rows of `profile` per model stage of `shape`'s schedule (profile_for_schedule); with
  // `quantum` > 0, times floored to multiples of it (the planner's time units). Throws InputError
  // where the profile does not cover the schedule's stages.
  CostTables(const Profile& profile, const PipelineShape& shape, double quantum = 0);

  const Table& of(int model_stage, InstructionKind kind) const;
  // The cost at exactly `frequency`; nullopt when the profile has no such row.
  std::optional<TimeEnergy> cost(int model_stage, InstructionKind kind, int frequency) const;
  // The cost at `frequency` of an instruction that runs there only until a clock change takes
  // effect (at the clock of the instruction before it on its GPU): the profiled row where there is
  // one. A profile measured online covers each kind only over the clocks where it can save (a
  // backward's may stop above the forwards'), and the clock before may lie outside it: between two
  // profiled clocks the cost is interpolated linearly; beyond them it is the nearest profiled
  // clock's, changed as another kind of the same model stage changes between those two clocks (the
  // same GPU making the same move), else with the time inversely proportional to the clock and the
  // energy the same. Nullopt only where the kind has no row at all.
  std::optional<TimeEnergy> cost_or_estimate(int model_stage, InstructionKind kind, int frequency) const;

 private:
  std::vector<Table> tables_;  // indexed by operation_index(model stage, kind)
};

}  // namespace perseus
