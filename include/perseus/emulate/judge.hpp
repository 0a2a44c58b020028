#pragma once
// The emulator as the judge of plans: every frontier point run on the measured profile, next to
// what the planner's cost model predicted for it.
#include <string>
#include <vector>

#include "perseus/emulate/emulator.hpp"
#include "perseus/plan/frontier_record.hpp"

namespace perseus {

struct JudgedPoint {
  std::size_t index = 0;
  double model_time = 0, model_energy = 0;        // the frontier's prediction
  double emulated_time = 0, emulated_energy = 0;  // the emulator's measurement
  double energy_error() const {                   // relative, signed: model vs emulated
    return emulated_energy != 0 ? (model_energy - emulated_energy) / emulated_energy : 0;
  }
};

struct JudgeSummary {
  std::size_t points = 0;
  double max_abs_energy_error = 0, mean_abs_energy_error = 0;
  double max_abs_time_error = 0;  // relative
};

// Walks the frontier in order (linear in its changes). The emulator must describe the record's
// pipeline (stages, microbatches, schedule); throws Error otherwise.
std::vector<JudgedPoint> judge_frontier(const FrontierRecord& record, const Emulator& emulator);
JudgeSummary summarize(const std::vector<JudgedPoint>& points);
std::string judged_csv(const std::vector<JudgedPoint>& points);

}  // namespace perseus
