#pragma once
// What one round measured, in the terms the turnkey controller decides with: the job's
// iteration time and energy, each (stage, kind)'s instruction time and energy, the blocking power,
// and each data-parallel pipeline's compute-bound iteration time (its schedule run with its own
// measured instruction durations). Plain numbers: whoever runs the ranks fills it in.
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "perseus/pipeline/schedule.hpp"
#include "perseus/profile/time_energy.hpp"

namespace perseus::online {

using StageKind = std::pair<int, InstructionKind>;

struct RoundMeasurement {
  double iteration_time = 0;  // the slowest rank's, per iteration
  double energy = 0;          // every rank's, per iteration
  int iterations = 0;         // iterations the round ran (0: not known)
  // Per (model stage, kind) (the stage itself unless the schedule runs model chunks): mean time and
  // energy of one instruction over the ranks that run it.
  std::map<StageKind, TimeEnergy> instructions;
  // The same per data-parallel pipeline (so that a slow pipeline's numbers can be left out).
  std::vector<std::map<StageKind, TimeEnergy>> pipeline_instructions;
  std::optional<double> blocking_power;  // watts outside forwards and backwards; none when never idle
  std::vector<double> pipeline_time;     // per pipeline: compute-bound iteration time
  std::vector<double> pipeline_energy;   // per pipeline: its ranks' energy per iteration
  // Per pipeline, stage and slot (schedule order): the instruction's mean measured duration.
  std::vector<std::vector<std::vector<double>>> slot_time;
  // Per (model stage, kind): each occurrence's duration in this round, one set per pipeline and rank
  // (all at one clock while the clocks of a (stage, kind) do not change within a round). Filled
  // only when asked for (warm-up and profiling rounds).
  std::map<StageKind, std::vector<std::vector<double>>> occurrences;
  // Clock locks the ranks made this round, and how many had not taken effect by the end of the
  // instruction they were made for (the clients read the clock back).
  int clock_changes = 0, clocks_late = 0;
};

}  // namespace perseus::online
