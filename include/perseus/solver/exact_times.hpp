#pragma once
// The iteration time and energy of a plan as the emulator measures them (emulate/emulator.hpp):
// every instruction takes the profiled time and energy of the clock its planned duration selects
// (OperationOptions::option_for), not its floored unit times; a GPU with nothing to run draws
// P_block. Kept up to date as durations change: a frontier point changes a few instructions,
// and at a fine unit time most of its steps change no clock at all, so only the end times a
// changed clock moves are computed again.
#include <cstdint>
#include <vector>

#include "perseus/solver/phillips_dessouky.hpp"

namespace perseus {

class ExactTimes {
 public:
  // `durations` per instruction, as the solver plans them.
  ExactTimes(const PlanningProblem& problem, const std::vector<int>& durations);

  // Whether the clock changed (only then do the time and energy).
  bool set_duration(int instruction, int duration);
  double time();    // seconds: the last instruction's end
  double energy();  // joules: every instruction's energy, plus P_block for every GPU's idle time
  int duration(int instruction) const { return duration_[instruction]; }
  const ExecutionOption& option(int instruction) const { return *option_[instruction]; }

  // The instructions of a longest path (through end times that meet start times), from the last
  // one back.
  std::vector<int> critical_path();

 private:
  void propagate();

  const PlanningProblem& problem_;
  int num_nodes_ = 0, sink_position_ = 0;
  std::vector<int> position_, node_at_;                     // node <-> topological position
  std::vector<int> pred_start_, pred_, succ_start_, succ_;  // by position, CSR
  std::vector<int> duration_;                               // per instruction
  std::vector<const ExecutionOption*> option_;              // per instruction: the clock its duration selects
  std::vector<double> time_at_, finish_;                    // per position
  std::vector<std::uint64_t> dirty_;                        // per position: its end time is to be computed again
  int first_dirty_ = 0;
  double busy_ = 0, compute_energy_ = 0;  // sums over instructions
  int updates_ = 0;                       // to those sums since they were last summed afresh
};

}  // namespace perseus
