#include "perseus/emulate/deadline_fit.hpp"

#include <algorithm>
#include <limits>

namespace perseus {

std::optional<DeadlineFit> fit_to_deadline(const Emulator& emulator, std::vector<std::vector<int>> frequencies,
                                           double deadline) {
  DeadlineFit fit;
  for (;;) {
    const auto run = emulator.run(frequencies);
    if (run.iteration_time <= deadline) {
      fit.time = run.iteration_time;
      fit.energy = run.energy;
      fit.frequencies = std::move(frequencies);
      return fit;
    }
    int lowest = std::numeric_limits<int>::max();
    for (const auto& stage : run.instructions) {
      for (const auto& unit : stage) {
        const int top = emulator.clocks(unit.instruction.stage, unit.instruction.kind).front();
        if (unit.critical && unit.frequency < top) lowest = std::min(lowest, unit.frequency);
      }
    }
    if (lowest == std::numeric_limits<int>::max()) return std::nullopt;  // the path is at top clocks
    for (std::size_t s = 0; s < run.instructions.size(); ++s) {
      for (std::size_t k = 0; k < run.instructions[s].size(); ++k) {
        const auto& unit = run.instructions[s][k];
        if (!unit.critical || unit.frequency != lowest) continue;
        const auto& clocks = emulator.clocks(unit.instruction.stage, unit.instruction.kind);  // fastest first
        const auto it = std::find(clocks.begin(), clocks.end(), unit.frequency);
        frequencies[s][k] = *(it - 1);
      }
    }
    ++fit.steps;
  }
}

}  // namespace perseus
